// Contention in this process, for the phases that start their own
// deployments (cluster.cpp, redlock_phase.cpp): W threads on one lock, each
// with a backend of its own, running the contention phase's cycles
// (contention.hpp), merged into one contention_result with its hold
// history checked.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <latch>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <support/hold_history.hpp>

#include "contention.hpp"

namespace dlock::compare {

/// Makes one worker's backend.
template <class B>
using make_fn = std::function<std::unique_ptr<B>()>;

/// `workers` threads on lock `key` of type L in this process, each with a
/// backend of its own (`make()`), running the contention phase's cycles
/// from the moment every backend is up, for `duration`. `control` sets the
/// inventory's counter and reads it back (keyed_command says where it
/// lives). The first three failures go to stderr; all are counted.
template <class L>
contention_result contend_here(const make_fn<typename L::backend_type>& make, typename L::backend_type& control,
                               const std::string& key, int workers, std::chrono::milliseconds duration) {
  const std::string counter = key + ":counter";
  keyed_command(control, counter, redis::request().push("SET", counter, 0));
  const auto n = static_cast<std::size_t>(workers);
  std::vector<std::vector<cycle>> cycles(n);
  std::vector<std::vector<std::string>> errors(n);
  std::latch ready(workers), go(1);
  std::atomic<std::int64_t> start{0};
  const std::int64_t duration_ns = std::chrono::nanoseconds(duration).count();
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < n; ++t) {
    pool.emplace_back([&, t] {
      const std::string me = "w" + std::to_string(t);
      std::unique_ptr<typename L::backend_type> backend;
      std::optional<L> lock;
      try {
        backend = make();
        lock.emplace(*backend, key);
      } catch (const std::exception& e) {
        errors[t].push_back(me + " " + e.what());
      }
      ready.count_down();
      go.wait();
      if (!lock) return;
      try {
        const auto s = start.load();
        worker_cycles(*backend, *lock, me, counter, s, s + duration_ns, cycles[t], errors[t]);
      } catch (const std::exception& e) {
        errors[t].push_back(me + " " + e.what());
      }
    });
  }
  ready.wait();
  start = test::monotonic_ns() + std::chrono::nanoseconds(std::chrono::milliseconds(20)).count();
  go.count_down();
  for (auto& t : pool) t.join();
  std::vector<cycle> all;
  test::hold_history history;
  for (auto& mine : cycles)
    for (auto& c : mine) {
      history.add(test::hold_span{key, c.worker, c.acquired, c.release_sent});
      all.push_back(std::move(c));
    }
  auto v = keyed_command(control, counter, redis::request().push("GET", counter));
  auto r = summarize(workers, duration_ns, std::move(all), history, v.is_null() ? 0 : std::stoll(v.str), 0);
  for (auto& mine : errors) {
    for (std::size_t i = 0; i < mine.size() && r.errors < 3; ++i)
      std::fprintf(stderr, "  %s: %s\n", key.c_str(), mine[i].c_str());
    r.errors += mine.size();
  }
  return r;
}

}  // namespace dlock::compare
