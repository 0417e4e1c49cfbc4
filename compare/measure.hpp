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
/// thread, with the policies' defaults. A few cycles first warm the
/// connection and load the scripts.
template <class L>
latency uncontended(RedisBackend& redis, const std::string& key, int n) {
  L lock(redis, key);
  for (int i = 0; i < 5; ++i) lock.acquire().release();
  std::vector<double> s;
  s.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto t0 = clock::now();
    auto hold = lock.acquire();
    hold.release();
    s.push_back(micros(clock::now() - t0));
  }
  return percentiles(s);
}

}  // namespace dlock::compare
