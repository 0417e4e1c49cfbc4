// dlock-compare's measurements, one function per phase, each a template on
// the lock type so that every combination of the compile-time list runs the
// same code.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/redis_py_lock.hpp>

#include "report.hpp"

namespace dlock::compare {

using clock = std::chrono::steady_clock;

inline double micros(clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

/// `n` PING round trips through the backend's blocking path (the same
/// path, and so the same thread hops, as a blocking lock call).
inline latency ping(RedisBackend& redis, int n) {
  std::vector<double> s;
  s.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto t0 = clock::now();
    redis.command(redis::request().push("PING"));
    s.push_back(micros(clock::now() - t0));
  }
  return percentiles(s);
}

/// The reference's side of the uncontended phase: redis-py's lock (null
/// when it does not run) and everything its blocks measured, over all rows.
struct reference_cycles {
  test::redis_py_lock* lock = nullptr;
  std::vector<double> samples, pings;
};

/// One PING through the backend's blocking path, in microseconds.
inline double one_ping(RedisBackend& redis) {
  auto t0 = clock::now();
  redis.command(redis::request().push("PING"));
  return micros(clock::now() - t0);
}

/// `k` uncontended cycles of `lock` (acquire() then release() of a Hold),
/// each timed and appended to `into`; returns the block's median.
template <class L>
double timed_cycles(L& lock, int k, std::vector<double>& into) {
  std::vector<double> mine;
  mine.reserve(static_cast<std::size_t>(k));
  for (int i = 0; i < k; ++i) {
    auto t0 = clock::now();
    auto hold = lock.acquire();
    hold.release();
    mine.push_back(micros(clock::now() - t0));
  }
  into.insert(into.end(), mine.begin(), mine.end());
  return median(mine);
}

/// `n` uncontended cycles of L: acquire() then release() of a Hold, on one
/// thread, with the policies' defaults, each timed. They run in `pairs`
/// blocks, each followed by as many PINGs through the same blocking path:
/// the cycle's ratio is taken against PINGs of the same moments, not of
/// the run's start (the machine's speed drifts). A few cycles first warm
/// the connection and load the scripts.
///
/// With a reference, each block is followed by as many of the reference's
/// cycles, back to back as ours, then as many PINGs the same way (A B A B
/// ...): each pair gives one ratio of the two blocks' medians, taken at the
/// same moments, and the reference's cycles and PINGs go to `ref`.
template <class L>
void uncontended(RedisBackend& redis, const std::string& key, int n, int pairs, combination_result& row,
                 reference_cycles& ref) {
  L lock(redis, key);
  for (int i = 0; i < 5; ++i) lock.acquire().release();
  std::vector<double> c, p;
  c.reserve(static_cast<std::size_t>(n));
  p.reserve(static_cast<std::size_t>(n));
  auto pings = [&](int k, std::vector<double>& into) {
    for (int i = 0; i < k; ++i) into.push_back(one_ping(redis));
  };
  for (int pair = 0; pair < pairs; ++pair) {
    const int block = n / pairs + (pair < n % pairs ? 1 : 0);
    const double mine = timed_cycles(lock, block, c);
    pings(block, p);
    if (!ref.lock) continue;
    auto theirs = ref.lock->cycles(block);
    pings(block, ref.pings);
    ref.samples.insert(ref.samples.end(), theirs.begin(), theirs.end());
    row.vs_reference_pairs.push_back(median(theirs) / mine);
  }
  row.uncontended = percentiles(c);
  row.ping = percentiles(p);
}

}  // namespace dlock::compare
