// dlock-compare's results: the figures of one run, its environment, the
// table on stdout and the JSON file.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace dlock::compare {

/// Percentiles of a set of durations, in microseconds.
struct latency {
  double p50_us = 0, p99_us = 0;
  std::size_t samples = 0;
};

/// The p50 and p99 of `samples_us` (which it sorts).
latency percentiles(std::vector<double>& samples_us);

/// Everything measured for one combination.
struct combination_result {
  std::string name;  ///< "token/fixed/spin"
  std::string ownership, renewal, wait;
  std::string reproduces;  ///< the article algorithm, as docs/algorithms.md names it
  latency uncontended;     ///< one acquire + release, blocking interface
};

/// Where and how the run happened.
struct environment {
  std::string redis_version;
  std::string redis_target;  ///< "private" or the URL without credentials
  latency ping;              ///< PING round trip through the same blocking path
  unsigned cpu_count = 0;
  std::string compiler, dlock_version, git_commit, depth;
};

/// The table for stdout: one row per combination, times as ratios of the
/// PING round trip beside the microseconds.
std::string table(const environment& env, const std::vector<combination_result>& rows);

/// The whole run as JSON (an object with "environment" and "combinations").
std::string json(const environment& env, const std::vector<combination_result>& rows);

}  // namespace dlock::compare
