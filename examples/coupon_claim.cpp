// The tour, seed 004's coupon claim: lock lock:coupon:<id> with a 30 s
// lease (SET NX PX with a token, A2) around the claim. When the lock is
// busy, the article sleeps 5 s and calls its claim again, by recursion, with
// no bound: under a holder that does not let go, the recursion only deepens.
// The fix is a bounded wait (try_acquire_for) that gives up at a deadline
// with an answer the caller can act on.
//
//   coupon_claim [redis://host:port]
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <system_error>
#include <thread>

#include "tour.hpp"

namespace {

using namespace dlock::examples::tour;
using CouponLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;

// The article's times: a 30 s lease, a 10 s task, 5 s between tries. The
// task and the interval are scaled down 100 times so the demo is short.
const ms lease = dlock::test::scaled(30s);
const ms work = dlock::test::scaled(10s) / 100, interval = dlock::test::scaled(5s) / 100;

const int coupon = 7;
const std::string lock_name = "lock:coupon:" + std::to_string(coupon);
const std::string claims = "coupon:" + std::to_string(coupon) + ":claimed";

// The claim itself: count it, then the article's task.
void claim(dlock::RedisBackend& redis) {
  redis.command(dlock::redis::request().push("INCR", claims));
  std::this_thread::sleep_for(work);
}

// How far the article's retry went.
struct retry_trace {
  int depth = 0;    // calls open now
  int deepest = 0;  // the most calls open at once
  std::uintptr_t first_frame = 0, deepest_frame = 0;  // a local's address in those calls
};

// The article's lock(): one try; when it fails, sleep, then call itself
// again. Nothing in it stops: `cap` is the demo's addition.
bool claim_by_recursion(CouponLock& lock, steady::time_point cap, retry_trace& trace) {
  char marker = 0;
  auto here = reinterpret_cast<std::uintptr_t>(&marker);
  if (++trace.depth == 1) trace.first_frame = here;
  if (trace.depth > trace.deepest) {
    trace.deepest = trace.depth;
    trace.deepest_frame = here;
  }
  bool claimed = false;
  if (auto hold = lock.try_acquire()) {
    claim(lock.backend());
    claimed = true;
  } else if (steady::now() < cap) {
    std::this_thread::sleep_for(interval);
    claimed = claim_by_recursion(lock, cap, trace);
  }
  // Work after the call: a C++ compiler may otherwise turn the recursion
  // into a loop, which the article's Java never does.
  --trace.depth;
  return claimed;
}

// The fix: wait at most `patience`. not_acquired means "busy, try later";
// any other error is Redis trouble; lease_lost from the release would mean
// the claim outlasted its lease.
std::error_code claim_with_deadline(CouponLock& lock, ms patience) {
  std::error_code ec;
  auto hold = lock.try_acquire_for(patience, ec);
  if (!hold) return ec;
  claim(lock.backend());
  hold->release(ec);
  return ec;
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url), other_client(target.url);
  redis.command(dlock::redis::request().push("DEL", lock_name, claims));
  CouponLock lock(redis, lock_name, {}, r::FixedLease{lease}, w::Spin{interval});
  const ms patience = dlock::test::scaled(1s), demo = dlock::test::scaled(2s);
  bool as_designed = true;

  // The happy path: the lock is free.
  auto free_ec = claim_with_deadline(lock, patience);
  std::printf("the lock is free: claim of coupon %d %s\n", coupon, free_ec ? free_ec.message().c_str() : "done");

  // Another client holds the lock for the rest of the demo.
  CouponLock others(other_client, lock_name, {}, r::FixedLease{lease}, w::Spin{interval});
  auto held = others.acquire();
  std::printf("another client now holds %s (a %lld s lease) and keeps it for the whole demo.\n",
              lock_name.c_str(), static_cast<long long>(lease.count() / 1000));

  // The article's retry, against it.
  retry_trace trace;
  bool recursion_claimed = claim_by_recursion(lock, steady::now() + demo, trace);
  auto stack_bytes = static_cast<long long>(trace.first_frame - trace.deepest_frame);  // the stack grows down
  long long per_frame = trace.deepest > 1 ? stack_bytes / (trace.deepest - 1) : 0;
  std::printf("the article's retry (5 s between tries, scaled to %lld ms), for %lld ms: %s.\n",
              static_cast<long long>(interval.count()), static_cast<long long>(demo.count()),
              recursion_claimed ? "it claimed the coupon" : "never claimed it");
  std::printf("  it reached depth %d, %lld bytes of stack (%lld a call), and was still going: only the\n"
              "  demo's time cap stopped it; the article's code has none.\n",
              trace.deepest, stack_bytes, per_frame);
  rlimit stack_limit{};
  if (per_frame > 0 && ::getrlimit(RLIMIT_STACK, &stack_limit) == 0 && stack_limit.rlim_cur != RLIM_INFINITY)
    std::printf("  at the real 5 s, 720 calls an hour: this thread's %llu KiB stack overflows after about %lld\n"
                "  hours of a stuck holder, and the request holds its thread all that time.\n",
                static_cast<unsigned long long>(stack_limit.rlim_cur / 1024),
                static_cast<long long>(stack_limit.rlim_cur) / per_frame / 720);
  if (recursion_claimed || trace.deepest < 10 || per_frame <= 0) {
    std::printf("unexpected: the recursive retry claimed the coupon, or its stack did not grow\n");
    as_designed = false;
  }

  // The fix, against the same holder.
  auto started = steady::now();
  auto busy_ec = claim_with_deadline(lock, patience);
  auto gave_up_after = std::chrono::duration_cast<ms>(steady::now() - started);
  std::printf("a bounded wait of %lld ms: after %lld ms it answered \"%s\": coupon %d is busy, try again later.\n",
              static_cast<long long>(patience.count()), static_cast<long long>(gave_up_after.count()),
              busy_ec.message().c_str(), coupon);
  if (free_ec || busy_ec != dlock::error::not_acquired || gave_up_after < patience ||
      gave_up_after > patience + dlock::test::scaled(1s)) {
    std::printf("unexpected: the free claim failed, or the bounded wait did not give up at its deadline\n");
    as_designed = false;
  }
  held.release();
  redis.command(dlock::redis::request().push("DEL", claims));

  std::printf("What it teaches: a retry needs a bound. Retrying by recursion adds a stack frame per try\n"
              "and never gives up; a deadline turns a busy lock into an answer the caller can handle.\n");
  if (as_designed)
    std::printf("verdict: the free lock was claimed; the recursive retry stopped only at the demo's cap "
                "(depth %d, %lld bytes of stack); the bounded wait gave up cleanly after %lld ms\n",
                trace.deepest, stack_bytes, static_cast<long long>(gave_up_after.count()));
  else
    std::printf("verdict: unexpected outcome (see above)\n");
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "coupon_claim: %s\n", e.what());
  return 2;
}
