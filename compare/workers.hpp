// W workers taking one lock over and over for a while, each with its own
// backend: what the permits and readers phases measure (acquisitions per
// second, the most holders at once, the server's commands per acquisition).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <dlock/backend/redis.hpp>
#include <support/hold_history.hpp>

#include "contention.hpp"

namespace dlock::compare {

/// One run's figures.
struct worker_run {
  std::size_t acquisitions = 0;
  double per_s = 0;                     ///< acquisitions per second
  int most_at_once = 0;                 ///< the most holders at one moment (this process's count)
  double commands_per_acquisition = 0;  ///< INFO commandstats over the run, per acquisition (failed tries included)
  std::size_t errors = 0;
};

/// The server's count of commands run so far (INFO commandstats).
inline std::int64_t commands_so_far(RedisBackend& info) {
  return total_calls(info.command(redis::request().push("INFO", "commandstats")).str);
}

/// `workers` threads, each with its own backend on `url` and its own lock
/// from `make(backend)` (a unique_ptr), take it with `take(lock, time left)`
/// (an optional hold, empty when the time ran out), hold it for `work`,
/// and release it, for `duration`. Commands are counted on `info` (the same
/// server).
template <class Make, class Take>
worker_run run_workers(RedisBackend& info, const std::string& url, int workers, std::chrono::milliseconds work,
                       std::chrono::milliseconds duration, Make make, Take take) {
  worker_run out;
  std::atomic<int> inside{0}, most{0};
  std::atomic<std::size_t> done{0}, errors{0};
  std::latch ready(workers), go(1);
  std::atomic<std::int64_t> end{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < workers; ++t) {
    pool.emplace_back([&] {
      std::unique_ptr<RedisBackend> backend;
      decltype(make(*backend)) lock;
      try {
        backend = std::make_unique<RedisBackend>(url);
        lock = make(*backend);
      } catch (const std::exception&) {
        ++errors;
      }
      ready.count_down();
      go.wait();
      if (!lock) return;
      while (test::monotonic_ns() < end.load()) {
        try {
          auto left = std::chrono::nanoseconds(end.load() - test::monotonic_ns());
          auto hold = take(*lock, std::chrono::duration_cast<std::chrono::milliseconds>(left));
          if (!hold) break;
          const int now = ++inside;
          for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
          }
          std::this_thread::sleep_for(work);
          --inside;
          hold->release();
          ++done;
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  }
  ready.wait();
  const auto before = commands_so_far(info);
  const auto t0 = test::monotonic_ns();
  end = t0 + std::chrono::nanoseconds(duration).count();
  go.count_down();
  for (auto& t : pool) t.join();
  const double seconds = static_cast<double>(test::monotonic_ns() - t0) / 1e9;
  const auto after = commands_so_far(info);
  out.acquisitions = done.load();
  out.per_s = static_cast<double>(out.acquisitions) / seconds;
  out.most_at_once = most.load();
  out.errors = errors.load();
  // Less the INFO that read `before`.
  if (out.acquisitions)
    out.commands_per_acquisition = static_cast<double>(after - before - 1) / static_cast<double>(out.acquisitions);
  return out;
}

}  // namespace dlock::compare
