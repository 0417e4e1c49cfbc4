// dlock-compare's measurements, one function per phase, each a template on
// the lock type so that every combination of the compile-time list runs the
// same code.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <dlock/dlock.hpp>

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

/// `n` uncontended cycles of L: acquire() then release() of a Hold, on one
/// thread, with the policies' defaults, each followed by one PING through
/// the same blocking path: the cycle's ratio is taken against PINGs of the
/// same moments, not of the run's start (the machine's speed drifts). A few
/// cycles first warm the connection and load the scripts.
template <class L>
void uncontended(RedisBackend& redis, const std::string& key, int n, latency& cycle, latency& ping) {
  L lock(redis, key);
  for (int i = 0; i < 5; ++i) lock.acquire().release();
  std::vector<double> c, p;
  c.reserve(static_cast<std::size_t>(n));
  p.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto t0 = clock::now();
    auto hold = lock.acquire();
    hold.release();
    auto t1 = clock::now();
    redis.command(redis::request().push("PING"));
    c.push_back(micros(t1 - t0));
    p.push_back(micros(clock::now() - t1));
  }
  cycle = percentiles(c);
  ping = percentiles(p);
}

}  // namespace dlock::compare
