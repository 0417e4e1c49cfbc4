// The tour, A1b: the first fix for A1 gives the key a lease with a second
// command, SETNX then PEXPIRE. A holder (this program, run again in a child
// mode) dies right between the two, at ownership::SetNx's test seam: the
// key stays without an expiry and nobody ever gets the lock. SET NX PX (A2)
// sets the value and the expiry in one command, so there is no such window.
//
//   crash_between_setnx_and_expire [redis://host:port]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#include "tour.hpp"

namespace {

using namespace dlock::examples::tour;
using TwoCommandLock = dlock::Lock<dlock::RedisBackend, o::SetNx, r::FixedLease, w::Spin>;  // A1b
using OneCommandLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;  // A2

const ms lease = dlock::test::scaled(500ms);
constexpr int crashed = 3;  // the child's exit status where it dies

// Child mode: take the lock and die at once, with no release: between
// SETNX and PEXPIRE for setnx, right after SET NX PX for token.
int crash_while_acquiring(const std::string& url, const std::string& design, const std::string& name) {
  dlock::RedisBackend redis(url);
  if (design == "setnx/fixed") {
    o::SetNx setnx;
    setnx.between_setnx_and_expire = [] { _exit(crashed); };  // on the backend's I/O thread
    TwoCommandLock lock(redis, name, setnx, r::FixedLease{lease});
    lock.try_lock();
    return 1;  // not reached: the lock was free
  }
  OneCommandLock lock(redis, name, {}, r::FixedLease{lease});
  if (!lock.try_lock()) return 1;
  _exit(crashed);
}

// Runs this program again in its child mode and waits for it to die.
// Returns its exit status and the time it was seen dead.
std::pair<int, steady::time_point> run_crasher(const std::string& url, const std::string& design,
                                               const std::string& name) {
  auto crasher = run_child_mode({url, design, name});
  int status = crasher.wait();
  return {status, steady::now()};
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc == 5 && std::string(argv[1]) == "--child-mode") return crash_while_acquiring(argv[2], argv[3], argv[4]);
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url);  // the client that comes after the crash
  const std::string two_key = "lock:coupon:two-commands", one_key = "lock:coupon:one-command";
  redis.command(dlock::redis::request().push("DEL", two_key, one_key));
  const ms wait = lease * 3;
  bool as_designed = true;

  // A1b: the holder dies after SETNX, before its PEXPIRE is sent.
  auto [two_status, two_died] = run_crasher(target.url, "setnx/fixed", two_key);
  long long two_ttl = pttl(redis, two_key);
  std::printf("setnx/fixed: a holder asked for a %lld ms lease, ran SETNX %s and died before PEXPIRE.\n",
              static_cast<long long>(lease.count()), two_key.c_str());
  std::printf("  the key is there with PTTL %lld: the lease never reached Redis.\n", two_ttl);
  TwoCommandLock two(redis, two_key, {}, r::FixedLease{lease}, w::Spin{dlock::test::scaled(20ms)});
  bool two_freed = taken_within(two, wait);
  std::printf("  another client waited %lld ms, three times that lease, and %s.\n", static_cast<long long>(wait.count()),
              two_freed ? "got the lock" : "never got the lock: it is A1's stuck lock again");
  redis.command(dlock::redis::request().push("DEL", two_key));  // clean up by hand, as an operator would
  if (two_status != crashed || two_ttl != -1 || two_freed) {
    std::printf("unexpected: the crash between SETNX and PEXPIRE did not leave a key without expiry\n");
    as_designed = false;
  }

  // A2: SET NX PX. The holder dies right after the one command.
  auto [one_status, one_died] = run_crasher(target.url, "token/fixed", one_key);
  long long one_ttl = pttl(redis, one_key);
  std::printf("token/fixed: a holder took %s with SET NX PX and died right after it.\n", one_key.c_str());
  std::printf("  the key came with its expiry, PTTL %lld: there was no moment without one.\n", one_ttl);
  OneCommandLock one(redis, one_key, {}, r::FixedLease{lease}, w::Spin{dlock::test::scaled(10ms)});
  auto hold = one.try_acquire_for(wait);
  auto freed_after = std::chrono::duration_cast<ms>(steady::now() - one_died);
  if (hold) {
    std::printf("  another client got the lock %lld ms after the crash.\n", static_cast<long long>(freed_after.count()));
    hold->release();
  } else {
    std::printf("  another client waited %lld ms and never got the lock.\n", static_cast<long long>(wait.count()));
  }
  if (one_status != crashed || one_ttl <= 0 || !hold || freed_after > lease + dlock::test::scaled(600ms)) {
    std::printf("unexpected: the SET NX PX lock did not free within about its lease\n");
    as_designed = false;
  }

  std::printf("What it teaches: two commands are two moments; a crash between them leaves the state\n"
              "of the first. Set the value and its expiry in one command (SET NX PX), or in one script.\n");
  if (as_designed)
    std::printf("verdict: a crash between SETNX and EXPIRE left a key with no expiry, never freed; "
                "SET NX PX freed it in %lld ms\n",
                static_cast<long long>(freed_after.count()));
  else
    std::printf("verdict: unexpected outcome (see above)\n");
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "crash_between_setnx_and_expire: %s\n", e.what());
  return 2;
}
