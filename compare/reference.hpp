// dlock-compare's reference: redis-py's Lock (Debian's python3-redis), run
// by compare/redis_py_lock.py through the uncontended and contention phases
// on the same server, in the same run, so that every dlock figure can be
// read against the lock most Redis users already have.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/redis_py_lock.hpp>

#include "contention.hpp"
#include "report.hpp"

namespace dlock::compare {

/// What the reference runs: as many contention runs as the combinations
/// get; its uncontended cycles alternate with theirs (see uncontended()).
struct reference_plan {
  std::string url;     ///< the server, as redis-py's from_url reads it
  std::string prefix;  ///< the run's key prefix
  std::vector<int> workers;
  run_times times;
  double ping_us = 0;  ///< the run's PING, for the hand-off ratios
};

/// Starts redis-py's Lock for the uncontended phase, whose cycles the
/// caller alternates with every row's (`lock`). `self` is this program (the
/// script is found beside it, or in ../share/dlock when installed). When
/// redis-py cannot run at all (no /usr/bin/python3, no redis module, no
/// script, a URL it cannot use) the result's `skipped` says why and `lock`
/// stays empty.
reference_result start_redis_py(const std::filesystem::path& self, const reference_plan& plan,
                                std::unique_ptr<test::redis_py_lock>& lock);

/// Runs redis-py's Lock through the contention phase (a failure once it
/// runs is counted as errors, like a dlock worker's); `step` reports
/// progress.
void contend_redis_py(RedisBackend& redis, const std::filesystem::path& self, const reference_plan& plan,
                      reference_result& ref, const std::function<void(const std::string&)>& step);

/// Steps contend_redis_py reports, for the progress total.
inline std::size_t reference_steps(const reference_plan& plan) { return plan.workers.size(); }

}  // namespace dlock::compare
