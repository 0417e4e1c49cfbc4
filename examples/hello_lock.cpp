// The smallest tour: Redisson's default lock (reentrant hash, watchdog,
// pub/sub) and a token lock with a fixed lease, on a private redis-server
// (or the URL given).
//
//   hello_lock [redis://host:port]
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

#include <dlock/dlock.hpp>
#include "example_redis.hpp"

using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url);

  // The plain form: Redisson's RLock, owned by this thread.
  dlock::Lock<> order(redis, "orders:42");
  {
    std::scoped_lock guard(order);
    auto field = redis.client_id() + ":" + dlock::Lock<>::thread_owner();
    auto count = redis.command(dlock::redis::request().push("HGET", "orders:42", field));
    auto ttl = redis.command(dlock::redis::request().push("PTTL", "orders:42"));
    std::printf("%s: held (hold count %s, lease %lld ms left)\n", order.combination_name().c_str(),
                count.str.c_str(), static_cast<long long>(ttl.integer));
  }
  std::printf("%s: released\n", order.combination_name().c_str());

  // A policy-built lock: token, 30 s fixed lease, spin every 100 ms.
  namespace o = dlock::ownership;
  namespace r = dlock::renewal;
  namespace w = dlock::wait;
  using CouponLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;
  CouponLock coupon(redis, "lock:coupon:7", {}, r::FixedLease{30s}, w::Spin{100ms});
  if (auto hold = coupon.try_acquire_for(2s)) {
    std::printf("%s: held, lease valid for %lld ms more\n", coupon.combination_name().c_str(),
                static_cast<long long>(hold->remaining_lease().count()));
    hold->release();
    std::printf("%s: released\n", coupon.combination_name().c_str());
  } else {
    std::printf("%s: held by someone else\n", coupon.combination_name().c_str());
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "hello_lock: %s\n", e.what());
  return 2;
}
