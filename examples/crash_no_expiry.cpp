// The tour, A1: a bare SETNX lock has no expiry, so a holder that crashes
// holds it forever. A holder in another process (this program, run again
// in a child mode) takes the lock and is killed with SIGKILL; nobody gets
// the lock after it. The fix is a lease set with the key (A2, SET NX PX):
// the same crash, and the lock frees by itself within the lease.
//
//   crash_no_expiry [redis://host:port]
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "tour.hpp"

namespace {

using namespace dlock::examples::tour;
using BareLock = dlock::Lock<dlock::RedisBackend, o::SetNx, r::None, w::Spin>;         // A1
using LeasedLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;  // A2

const ms lease = dlock::test::scaled(500ms);

// Child mode: take the lock, say so, and wait to be killed.
template <class L>
int hold_until_killed(const std::string& url, const std::string& name, typename L::renewal_type renewal) {
  dlock::RedisBackend redis(url);
  L lock(redis, name, {}, renewal);
  auto hold = lock.acquire();
  std::printf("acquired\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(1h);
}

// Runs this program again as the holder of `name`, waits until it holds the
// lock, then kills it with SIGKILL: no release, no cleanup.
void crash_a_holder(const std::string& url, const std::string& design, const std::string& name) {
  auto holder = run_child_mode({url, design, name});
  if (holder.read_line() != "acquired") throw std::runtime_error("the holder process did not take " + name);
  holder.kill();
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc == 5 && std::string(argv[1]) == "--child-mode") {
    if (std::string(argv[3]) == "setnx/none") return hold_until_killed<BareLock>(argv[2], argv[4], {});
    return hold_until_killed<LeasedLock>(argv[2], argv[4], r::FixedLease{lease});
  }
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url);  // the client that comes after the crash
  const std::string bare_key = "lock:report:bare", leased_key = "lock:report:leased";
  redis.command(dlock::redis::request().push("DEL", bare_key, leased_key));
  bool as_designed = true;

  // A1: SETNX, no expiry. The holder dies holding it.
  crash_a_holder(target.url, "setnx/none", bare_key);
  long long bare_ttl = pttl(redis, bare_key);
  std::printf("setnx/none: a holder in another process took %s and was killed (SIGKILL).\n", bare_key.c_str());
  std::printf("  the key is still there, PTTL %lld: it has no expiry, nothing will ever delete it.\n", bare_ttl);
  BareLock bare(redis, bare_key, {}, {}, w::Spin{dlock::test::scaled(20ms)});
  const ms wait = lease * 3;
  bool bare_freed = taken_within(bare, wait);
  std::printf("  another client waited %lld ms (three leases of the fix below) and %s.\n",
              static_cast<long long>(wait.count()), bare_freed ? "got the lock" : "never got the lock");
  redis.command(dlock::redis::request().push("DEL", bare_key));
  std::printf("  only an operator's DEL frees it now (done here, to clean up).\n");
  if (bare_ttl != -1 || bare_freed) {
    std::printf("unexpected: the bare SETNX lock had an expiry or freed by itself\n");
    as_designed = false;
  }

  // The fix: a lease, set with the key in one command. The same crash.
  crash_a_holder(target.url, "token/fixed", leased_key);
  auto killed = steady::now();
  long long leased_ttl = pttl(redis, leased_key);
  std::printf("token/fixed: the same crash, with a %lld ms lease set by SET NX PX (PTTL %lld after the kill).\n",
              static_cast<long long>(lease.count()), leased_ttl);
  LeasedLock leased(redis, leased_key, {}, r::FixedLease{lease}, w::Spin{dlock::test::scaled(10ms)});
  auto hold = leased.try_acquire_for(wait);
  auto freed_after = std::chrono::duration_cast<ms>(steady::now() - killed);
  if (hold) {
    std::printf("  the key expired by itself: another client got the lock %lld ms after the kill.\n",
                static_cast<long long>(freed_after.count()));
    hold->release();
  } else {
    std::printf("  another client waited %lld ms and never got the lock.\n", static_cast<long long>(wait.count()));
  }
  // The lease began before the kill, so the lock must free within it (plus
  // one spin, a round trip and a busy machine).
  if (!hold || leased_ttl <= 0 || freed_after > lease + dlock::test::scaled(600ms)) {
    std::printf("unexpected: the leased lock did not free within about its lease\n");
    as_designed = false;
  }

  std::printf("What it teaches: a lock key with no expiry outlives a holder that crashes, and every\n"
              "client waits for it forever; a lease bounds how long a dead holder can block the rest.\n");
  if (as_designed)
    std::printf("verdict: setnx/none never freed after its holder was killed; a %lld ms lease freed it in %lld ms\n",
                static_cast<long long>(lease.count()), static_cast<long long>(freed_after.count()));
  else
    std::printf("verdict: unexpected outcome (see above)\n");
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "crash_no_expiry: %s\n", e.what());
  return 2;
}
