// dlock-compare's reference: redis-py's Lock (Debian's python3-redis), run
// by compare/redis_py_lock.py through the uncontended and contention phases
// on the same server, in the same run, so that every dlock figure can be
// read against the lock most Redis users already have.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <dlock/dlock.hpp>

#include "contention.hpp"
#include "report.hpp"

namespace dlock::compare {

/// What the reference runs: as many cycles and contention runs as the
/// combinations get.
struct reference_plan {
  std::string url;     ///< the server, as redis-py's from_url reads it
  std::string prefix;  ///< the run's key prefix
  int cycles = 0, pings = 0;
  std::vector<int> workers;
  run_times times;
  double ping_us = 0;  ///< the run's PING, for the hand-off ratios
};

/// Measures redis-py's Lock. `self` is this program (the script is found
/// beside it, or in ../share/dlock when installed); `step` reports progress.
/// When redis-py cannot run at all (no /usr/bin/python3, no redis module,
/// no script) the result's `skipped` says why; a failure once it runs is
/// counted as errors, like a dlock worker's.
reference_result measure_redis_py(RedisBackend& redis, const std::filesystem::path& self, const reference_plan& plan,
                                  const std::function<void(const std::string&)>& step);

/// Steps measure_redis_py reports, for the progress total.
inline std::size_t reference_steps(const reference_plan& plan) { return 1 + plan.workers.size(); }

}  // namespace dlock::compare
