// Runs a body on several threads and counts the ones that threw: the
// crowds of the lock-kind tests (lock_worker_kinds.cpp, shared_kinds.hpp).
#pragma once

#include <atomic>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

namespace dlock::test {

/// Runs `body(t)` for t in 0..threads-1, each on a thread of its own;
/// returns how many threw (each one's error printed to stderr after
/// `who`).
template <class F>
int on_threads(int threads, const char* who, F body) {
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        body(t);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", who, e.what());
        ++failures;
      }
    });
  for (auto& t : pool) t.join();
  return failures;
}

}  // namespace dlock::test
