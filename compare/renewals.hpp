// dlock-compare's renewal phase: what the server pays to keep many held
// locks alive, with the watchdog's renewals batched (up to 100 locks per
// script call) and one script call per lock, alternating in one run.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <dlock/backend/redis.hpp>

namespace dlock::compare {

/// One way of renewing, over its measured windows.
struct renewal_side {
  std::size_t renewed = 0;      ///< holds renewed (the client's count)
  std::size_t calls = 0;        ///< script calls the client sent for them
  long long pexpires = 0;       ///< PEXPIRE the server ran (one per renewed lock)
  double script_us = 0;         ///< the scripts' time on the server (INFO commandstats usec)
  double cpu_us = 0;            ///< the server process's CPU time (INFO cpu, user + sys), less its idle CPU
  double script_us_per_lock() const { return renewed ? script_us / static_cast<double>(renewed) : 0; }
  double cpu_us_per_lock() const { return renewed ? cpu_us / static_cast<double>(renewed) : 0; }
  double calls_per_lock() const { return renewed ? static_cast<double>(calls) / static_cast<double>(renewed) : 0; }
};

/// `locks` held default locks (Lock<>, Watchdog `timeout`) on one backend.
struct renewal_row {
  int locks = 0;
  renewal_side batched, single;
  /// Batched over single, script time and CPU per renewed lock, one ratio
  /// per alternating pair.
  std::vector<double> script_pairs, cpu_pairs;
  double idle_cpu_us_per_s = 0;  ///< the idle server's CPU, taken off the cpu figures
  std::size_t lost = 0;  ///< holds signalled lost during the phase (should be none)
};

struct renewals_result {
  std::chrono::milliseconds timeout{0};
  std::size_t batch_limit = 0;
  std::vector<renewal_row> rows;
};

/// For each number in `held`: holds that many Lock<> on a backend of its
/// own on `url` (keys under `prefix`), then measures two renewal periods
/// batched and two with one call per lock, `pairs` times (A B, then B A),
/// from INFO on `info` (a connection to the same server).
renewals_result run_renewals(RedisBackend& info, const std::string& url, const std::string& prefix,
                             const std::vector<int>& held, int pairs);

std::string renewals_table(const renewals_result& r);
std::string renewals_json(const renewals_result& r);

}  // namespace dlock::compare
