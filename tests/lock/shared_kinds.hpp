// The locks that admit several holders (ReadWrite's readers, Semaphore's
// permits) on any backend fixture (backend_fixtures.hpp): threads mixing
// readers and writers over several read-write locks, and threads taking a
// semaphore's permits, under the hold-history checker. test_sentinel and
// test_cluster run it on their deployments.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <support/hold_history.hpp>

#include "lock_support.hpp"
#include "on_threads.hpp"

namespace dlock::test {

/// On fixture `f`'s backend: 6 threads over the read-write locks `names`
/// (every fourth hold a write), then 6 threads over a Semaphore{3} named
/// `semaphore`, all with the watchdog and pub/sub wake-ups. No write
/// overlaps any hold of its lock, reads do overlap, and the semaphore has
/// three holders at once and never a fourth.
template <class F>
void shared_kinds_test(F& f, const std::vector<std::string>& names, const std::string& semaphore) {
  using B = typename F::backend_type;
  using RW = dlock::Lock<B, ownership::ReadWrite, renewal::Watchdog, wait::PubSub>;
  using Permits = dlock::Lock<B, ownership::Semaphore, renewal::Watchdog, wait::PubSub>;
  constexpr int threads = 6, holds = 24;
  hold_history history;
  std::atomic<int> failures{0};
  auto crowd = [&](auto body) { failures += on_threads(threads, "shared kinds worker", body); };
  auto timed = [](hold_span& span) {
    span.start_ns = monotonic_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    span.end_ns = monotonic_ns();
  };

  std::vector<std::unique_ptr<RW>> locks;
  for (auto& n : names) locks.push_back(std::make_unique<RW>(f.backend, n, ownership::ReadWrite{}, renewal::Watchdog{scaled(10s)}));
  crowd([&](int t) {
    for (int i = 0; i < holds; ++i) {
      const auto k = static_cast<std::size_t>(t + i) % locks.size();
      const bool write = (t + i / 2) % 4 == 0;
      hold_span span{names[k], "t" + std::to_string(t), 0, 0, !write};
      if (write) {
        std::unique_lock held(*locks[k]);
        timed(span);
      } else {
        std::shared_lock held(*locks[k]);
        timed(span);
      }
      history.add(std::move(span));
    }
  });

  Permits permits(f.backend, semaphore, ownership::Semaphore{3}, renewal::Watchdog{scaled(10s)});
  crowd([&](int t) {
    for (int i = 0; i < holds; ++i) {
      hold_span span{semaphore, "t" + std::to_string(t), 0, 0, true};
      std::scoped_lock held(permits);
      timed(span);
      history.add(std::move(span));
    }
  });

  CHECK(failures == 0);
  CHECK(history.size() == 2 * threads * holds);
  auto overlaps = history.overlaps();
  for (auto& o : overlaps) UNSCOPED_INFO(o.earlier.format() << " and " << o.later.format());
  CHECK(overlaps.empty());
  std::size_t most_readers = 0;
  for (auto& n : names) most_readers = std::max(most_readers, history.most_at_once(n));
  CHECK(most_readers >= 2);  // readers did share
  CHECK(history.most_at_once(semaphore) == 3);
}

}  // namespace dlock::test
