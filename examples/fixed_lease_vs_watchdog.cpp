// Work that outlasts its lease (A2, the coupon story of seed 004, and its
// fix, A2 or A4 with Redisson's watchdog). Client 1 takes the lock and works
// for two and a half leases; client 2, on its own connection, waits for it.
// - ownership::Token + renewal::FixedLease: the key expires while client 1
//   still works, client 2 gets in, and both run the critical section at
//   once. Client 1 hears of it only at release: error::lease_lost.
// - Token or ReentrantHash + renewal::Watchdog: the lease is renewed every
//   third of itself while client 1 lives, so client 2 waits until the work
//   is done and the lock released.
//
//   fixed_lease_vs_watchdog [redis://host:port]
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <future>
#include <string>
#include <thread>

#include <support/hold_history.hpp>
#include "tour.hpp"

using namespace dlock::examples::tour;
using std::chrono::milliseconds;
using dlock::test::monotonic_ns;
using dlock::test::scaled;

namespace {

// A lease long enough that a busy machine's stalls (a few hundred ms when
// CI builds beside the tests) cannot starve a watchdog of two thirds of it:
// then only the fixed lease, by design, runs out.
const milliseconds lease = scaled(1000ms), work = lease * 5 / 2;

long long ms(std::int64_t ns) { return static_cast<long long>(ns / 1'000'000); }

struct outcome {
  bool overlapped = false;
  std::error_code release;  // what client 1's release reported
};

// Client 1 holds the lock for `work` while client 2 waits for it; each
// critical section is stamped on CLOCK_MONOTONIC into a hold history.
template <class L, class R, class W>
outcome run(const std::string& url, const std::string& key, R renewal, W wait) {
  dlock::RedisBackend backend_1(url), backend_2(url);
  L first(backend_1, key, {}, renewal, wait);
  L second(backend_2, key, {}, renewal, wait);
  std::printf("%s, lease %lld ms, work %lld ms:\n", L::combination_name().c_str(),
              static_cast<long long>(lease.count()), static_cast<long long>(work.count()));

  dlock::test::hold_history history;
  std::atomic<std::int64_t> lost_at{0};  // before the hold: outlives its loss callback
  auto hold = first.acquire();
  const auto t0 = monotonic_ns();
  hold.on_lost([&] { lost_at = monotonic_ns(); });
  auto other = std::async(std::launch::async, [&] {
    auto h = second.try_acquire_for(work * 3);
    if (!h) return;
    auto start = monotonic_ns();
    std::this_thread::sleep_for(lease / 2);  // client 2's own critical section, well within its lease
    history.add({key, "client-2", start, monotonic_ns()});
    h->release();
  });
  std::this_thread::sleep_for(work);  // the work, which never looks at the loss signal
  const auto t1 = monotonic_ns();
  history.add({key, "client-1", t0, t1});
  if (hold.lost() && lost_at != 0)
    std::printf("  client 1: worked %lld ms; the hold was signalled lost %lld ms in (nobody looked)\n", ms(t1 - t0),
                ms(lost_at - t0));
  else if (hold.lost())  // lost, its callback still running
    std::printf("  client 1: worked %lld ms; the hold was signalled lost on the way (nobody looked)\n", ms(t1 - t0));
  else
    std::printf("  client 1: worked %lld ms; the hold was never lost\n", ms(t1 - t0));
  outcome out;
  hold.release(out.release);
  std::printf("  client 1: release says: %s\n", out.release ? out.release.message().c_str() : "ok");
  other.get();

  for (auto& span : history.spans())
    if (span.worker == "client-2")
      std::printf("  client 2: got the lock %lld ms after client 1 did, %s\n", ms(span.start_ns - t0),
                  span.start_ns < t1 ? ("while client 1 had " + std::to_string(ms(t1 - span.start_ns)) +
                                        " ms of work left").c_str()
                                     : "after client 1 had released it");
  auto overlaps = history.overlaps();
  out.overlapped = !overlaps.empty();
  if (out.overlapped)
    std::printf("  OVERLAP: both clients were in the critical section for %lld ms\n",
                ms(overlaps.front().overlap_ns()));
  else
    std::printf("  no overlap: client 2 waited until client 1 had released\n");
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  using TokenFixed = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;
  using TokenWatchdog = dlock::Lock<dlock::RedisBackend, o::Token, r::Watchdog, w::Spin>;
  using HashWatchdog = dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::Watchdog, w::PubSub>;
  auto fixed = run<TokenFixed>(target.url, "tour:report:fixed", r::FixedLease{lease}, w::Spin{10ms});
  auto token = run<TokenWatchdog>(target.url, "tour:report:token", r::Watchdog{lease}, w::Spin{10ms});
  auto hash = run<HashWatchdog>(target.url, "tour:report:hash", r::Watchdog{lease}, w::PubSub{});

  std::printf("\nWhat it teaches: a fixed lease is a guess at how long the work takes. When the\n"
              "guess is wrong the lock expires under its holder, and the holder learns it only\n"
              "when it releases (or if it watches Hold::stop_token()). A watchdog renews the\n"
              "lease while the holder is alive, so the lease no longer has to guess; a holder\n"
              "that dies stops renewing, and its lock frees within one lease.\n");
  bool as_designed = fixed.overlapped && fixed.release == dlock::error::lease_lost && !token.overlapped &&
                     !token.release && !hash.overlapped && !hash.release;
  if (!as_designed)
    std::printf("unexpected: the fixed lease should overlap and report lease_lost, and both watchdogs "
                "should neither overlap nor fail their release\n");
  std::printf("verdict: the fixed lease %s; the watchdog %s\n",
              fixed.overlapped ? "let a second client in during the work" : "did not overlap",
              !token.overlapped && !hash.overlapped ? "kept it out until the work was done" : "overlapped too");
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fixed_lease_vs_watchdog: %s\n", e.what());
  return 2;
}
