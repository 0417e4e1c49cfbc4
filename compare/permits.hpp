// dlock-compare's permits phase: what a semaphore's permits buy. W workers
// on one ownership::Semaphore, each with its own backend, hold a permit
// for a fixed piece of work and give it back, with one permit and with
// several, in runs that alternate: acquisitions per second, the most
// holders seen at once, and the commands the server ran per acquisition.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <dlock/backend/redis.hpp>

#include "workers.hpp"

namespace dlock::compare {

/// One semaphore size over its runs (the last run's figures, the rates of all).
struct permits_side : worker_run {
  std::int64_t permits = 0;
};

struct permits_result {
  std::string combination;  ///< the lock type, with one permit and with more
  int workers = 0;
  std::chrono::milliseconds work{0};  ///< how long each hold lasts
  std::vector<permits_side> sides;    ///< one permit, then more
  std::vector<double> rate_pairs;     ///< per pair of runs: the larger semaphore's rate over one permit's
};

/// Runs `workers` workers on a Semaphore{1} and a Semaphore{`permits`} on
/// `url` (keys under `prefix`), each run `duration` long, `pairs` times (A
/// B, then B A), counting commands from INFO on `info` (the same server).
permits_result run_permits(RedisBackend& info, const std::string& url, const std::string& prefix, int workers,
                           std::int64_t permits, std::chrono::milliseconds duration, int pairs);

std::string permits_table(const permits_result& r);
std::string permits_json(const permits_result& r);

}  // namespace dlock::compare
