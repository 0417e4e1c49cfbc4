// The tour, S: a semaphore kept as a counter of free permits (take one by
// decrementing it, give it back by incrementing it, as Redisson's
// RSemaphore does) leaks the permit of every holder that crashes: nothing
// ever gives it back. Two holders in other processes (this program, run
// again in a child mode) each take one of two permits and are killed with
// SIGKILL; after them, nobody gets a permit, ever. The fix is
// ownership::Semaphore: each permit is an entry with its own lease, so the
// same two crashes cost their permits only until the leases end.
//
//   leaked_permit [redis://host:port]
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "tour.hpp"

namespace {

using namespace dlock::examples::tour;
using Permits = dlock::Lock<dlock::RedisBackend, o::Semaphore, r::FixedLease, w::Spin>;

const ms lease = dlock::test::scaled(500ms);
constexpr int permits = 2;

// The counter design: the key holds the number of free permits (created
// with `permits` on first use). One script takes a permit if one is free.
bool counter_take(dlock::RedisBackend& redis, const std::string& key) {
  static const char* take = R"lua(
local free = tonumber(redis.call('GET', KEYS[1]) or ARGV[1])
if free > 0 then
  redis.call('SET', KEYS[1], free - 1)
  return 1
end
return 0
)lua";
  return redis.command(dlock::redis::request().push("EVAL", take, 1, key, permits)).integer == 1;
}
void counter_give_back(dlock::RedisBackend& redis, const std::string& key) {
  redis.command(dlock::redis::request().push("INCR", key));
}

// Child mode: take a permit of `key` by `design`, say so, and wait to be killed.
int hold_until_killed(const std::string& url, const std::string& design, const std::string& key) {
  dlock::RedisBackend redis(url);
  if (design == "counter") {
    if (!counter_take(redis, key)) return 1;
    std::printf("acquired\n");
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(1h);
  }
  Permits semaphore(redis, key, o::Semaphore{permits}, r::FixedLease{lease});
  auto hold = semaphore.try_acquire();
  if (!hold) return 1;
  std::printf("acquired\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(1h);
}

// Two holders in other processes take a permit each and are killed.
void crash_two_holders(const std::string& url, const std::string& design, const std::string& key) {
  for (int i = 0; i < permits; ++i) {
    auto holder = run_child_mode({url, design, key});
    if (holder.read_line() != "acquired") throw std::runtime_error("a holder process did not take a permit of " + key);
    holder.kill();
  }
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc == 5 && std::string(argv[1]) == "--child-mode") return hold_until_killed(argv[2], argv[3], argv[4]);
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url);  // the client that comes after the crashes
  const std::string counter_key = "pool:counter", expiring_key = "pool:expiring";
  redis.command(dlock::redis::request().push("DEL", counter_key, expiring_key, o::Semaphore::permits_key(expiring_key)));
  bool as_designed = true;

  // The counter: two permits, two crashed holders.
  crash_two_holders(target.url, "counter", counter_key);
  auto left = redis.command(dlock::redis::request().push("GET", counter_key)).str;
  std::printf("counter semaphore, %d permits: two holders in other processes took one each and were killed.\n",
              permits);
  std::printf("  the counter says %s free, and nothing will ever give the two permits back.\n", left.c_str());
  const ms wait = lease * 3;
  bool counter_freed = false;
  for (auto until = steady::now() + wait; !counter_freed && steady::now() < until;) {
    if ((counter_freed = counter_take(redis, counter_key))) counter_give_back(redis, counter_key);
    else std::this_thread::sleep_for(dlock::test::scaled(20ms));
  }
  std::printf("  another client waited %lld ms (three leases of the fix below) and %s.\n",
              static_cast<long long>(wait.count()), counter_freed ? "got a permit" : "never got a permit");
  redis.command(dlock::redis::request().push("DEL", counter_key));
  std::printf("  only an operator's reset gives them back (done here, to clean up).\n");
  if (left != "0" || counter_freed) {
    std::printf("unexpected: the counter gave a permit back by itself\n");
    as_designed = false;
  }

  // The fix: each permit its own entry with a lease. The same two crashes.
  crash_two_holders(target.url, "expiring", expiring_key);
  auto killed = steady::now();
  auto in_use = redis.command(dlock::redis::request().push("ZCARD", expiring_key)).integer;
  std::printf("semaphore/fixed, %d permits: the same two crashes, each permit with a %lld ms lease (%lld in use "
              "after the kills).\n",
              permits, static_cast<long long>(lease.count()), static_cast<long long>(in_use));
  Permits after(redis, expiring_key, o::Semaphore{permits}, r::FixedLease{lease}, w::Spin{dlock::test::scaled(10ms)});
  auto hold = after.try_acquire_for(wait);
  auto freed_ms = std::chrono::duration_cast<ms>(steady::now() - killed).count();
  if (hold) {
    std::printf("  another client got a permit %lld ms after the kills: the first dead holder's lease had ended.\n",
                static_cast<long long>(freed_ms));
    hold->release();
  } else {
    std::printf("  another client waited %lld ms and got no permit.\n", static_cast<long long>(wait.count()));
  }
  if (in_use != permits || !hold || freed_ms > (lease * 2).count()) {
    std::printf("unexpected: the expiring permits did not come back within their lease\n");
    as_designed = false;
  }
  redis.command(dlock::redis::request().push("DEL", expiring_key, o::Semaphore::permits_key(expiring_key)));

  std::printf("\nWhat it teaches: a count that holders change can be left wrong by a holder that dies between\n"
              "its two changes. Count live entries, each with a lease, instead: a crash then costs a permit for\n"
              "one lease at most.\n");
  if (as_designed)
    std::printf("verdict: the counter semaphore lost both permits to killed holders for good; the expiring permits "
                "came back within their lease\n");
  else
    std::printf("verdict: unexpected, see above\n");
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "leaked_permit: %s\n", e.what());
  return 2;
}
