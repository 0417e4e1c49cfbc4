// Build your own lock: a renewal policy and a wait policy written here, in
// user code, combined with dlock's Token ownership at compile time. The
// worked example of docs/writing-a-policy.md.
//
//   own_policies [redis://host:port]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include <dlock/dlock.hpp>
#include "example_redis.hpp"

using namespace std::chrono_literals;
using std::chrono::milliseconds;

// A watchdog for a slow link: renews every quarter of the lease instead of
// every third, so a renewal has three quarters of the lease to be confirmed.
// The numbers are its own; the behaviour is dlock's renewing keeper.
struct EagerWatchdog {
  static constexpr const char* policy_name = "eager";
  static constexpr bool expires = true;  // the key gets a lease
  static constexpr bool renews = true;   // so the rule table asks for an owner-checked ownership

  milliseconds timeout{30s};
  dlock::loss_margin safety{};

  milliseconds lease() const { return timeout; }
  milliseconds period() const { return timeout / 4; }
  milliseconds margin() const { return safety.of(timeout); }
  std::error_code validate() const { return dlock::ext::validate_lease(timeout, safety, timeout / 4); }

  template <class B>
  using keeper = dlock::keepers::renewing<B>;
};

// A linear backoff: waits step, 2 x step, 3 x step, ... up to `cap`, never
// past the caller's deadline. One waiter per acquire operation keeps its
// own count.
struct Linear {
  static constexpr const char* policy_name = "linear";
  static constexpr bool needs_publish = false;  // it polls; any ownership will do

  milliseconds step{10ms}, cap{200ms};

  std::error_code validate() const {
    if (step <= milliseconds::zero() || cap < step) return make_error_code(dlock::error::invalid_interval);
    return {};
  }

  template <class B>
  struct waiter {
    waiter(const Linear& p, B&, const std::string& /*name*/, const std::string& /*channel*/) : step(p.step), cap(p.cap) {}
    dlock::asio::awaitable<dlock::error_code> prepare() { co_return dlock::error_code{}; }
    dlock::asio::awaitable<dlock::error_code> wait(std::optional<milliseconds> /*held_for*/,
                                                   dlock::ext::steady::time_point deadline) {
      auto pause = std::min(cap, step * ++tries);
      // Cancellable: an acquire cancelled while it sleeps ends at once.
      co_return co_await dlock::ext::sleep_until(std::min(deadline, dlock::ext::steady::now() + pause));
    }
    milliseconds step, cap;
    int tries = 0;
  };
};

using ReportLock = dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, EagerWatchdog, Linear>;

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url);
  ReportLock report(redis, "lock:report", {}, EagerWatchdog{1500ms}, Linear{5ms, 50ms});
  std::printf("%s: a Token lock with two policies written in this file\n", ReportLock::combination_name().c_str());

  // The holder works for 3 s: two leases, kept by renewals every 375 ms.
  auto hold = report.acquire();
  std::thread other([&] {
    // Another thread waits for it, backing off linearly.
    auto start = std::chrono::steady_clock::now();
    auto h = report.try_acquire_for(10s);
    auto waited = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    std::printf("second holder: %s after %lld ms\n", h ? "acquired" : "gave up", static_cast<long long>(waited.count()));
  });
  std::this_thread::sleep_for(3s);
  bool kept = !hold.lost();
  std::printf("first holder: worked 3 s on a 1500 ms lease; still held: %s\n", kept ? "yes" : "no");
  hold.release();
  other.join();
  std::printf("verdict: %s\n", kept ? "the eager watchdog kept the lock for the whole work"
                                    : "the lock was lost during the work");
  return kept ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "own_policies: %s\n", e.what());
  return 2;
}
