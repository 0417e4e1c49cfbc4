// A holder paused past its lease (A4's limit, Redisson's default lock
// dlock::Lock<>: reentrant hash, watchdog, pub/sub). Client 1 runs in a child
// process (this program, re-run with --hold) and takes the lock; the parent
// stops it with SIGSTOP, as a long GC pause or a VM migration would. Its
// watchdog cannot run, the lease ends, and client 2 takes the lock. Then
// SIGCONT: client 1 goes on with its critical section, believing it still
// holds the lock, while client 2 is in its own. The two critical sections,
// stamped on CLOCK_MONOTONIC (shared by both processes), overlap; client 1
// learns it too late, from its loss signal and at release (lease_lost).
// No lease and no watchdog can prevent this: only the protected resource
// can, by refusing writes that carry an older fencing token. The lock here
// hands out fencing tokens; both clients write to a fenced_store (kept by
// this parent process, as a remote service would be), and client 1's late
// write is refused.
//
//   paused_holder [redis://host:port]
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <dlock/dlock.hpp>
#include <support/child_process.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include "example_redis.hpp"
#include "fenced_store.hpp"

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using dlock::test::monotonic_ns;
using dlock::test::scaled;

namespace {

const milliseconds lease = scaled(600ms), work = lease * 3;
const std::string key = "tour:paused";

// Dlock's default lock (reentrant hash, watchdog, pub/sub), handing out
// fencing tokens.
dlock::ownership::ReentrantHash fenced() {
  dlock::ownership::ReentrantHash o;
  o.fencing = dlock::fencing_tokens{};
  return o;
}

long long ms(std::int64_t ns) { return static_cast<long long>(ns / 1'000'000); }

// Client 1, in the child process: takes the lock, prints "acquired <ns>
// <fencing token>", works in small steps until `work` has passed on the
// clock (a pause stretches nothing: the clock goes on), prints "end <ns>
// <loss signal ns, or 0>" (its work's write, which the parent sends to the
// store with its token), releases and prints "released <what its release
// said>".
int hold_main(const std::string& url) {
  dlock::RedisBackend redis(url);
  dlock::Lock<> lock(redis, key, fenced(), dlock::renewal::Watchdog{lease});
  auto hold = lock.acquire();
  std::atomic<std::int64_t> lost_at{0};
  hold.on_lost([&] { lost_at = monotonic_ns(); });
  auto start = monotonic_ns();
  std::printf("acquired %lld %llu\n", static_cast<long long>(start),
              static_cast<unsigned long long>(hold.fencing_token().value_or(0)));
  std::fflush(stdout);
  while (monotonic_ns() < start + work.count() * 1'000'000) std::this_thread::sleep_for(5ms);
  std::printf("end %lld %lld\n", static_cast<long long>(monotonic_ns()), static_cast<long long>(lost_at.load()));
  std::error_code ec;
  hold.release(ec);
  std::printf("released %s\n", !ec ? "ok" : ec == dlock::error::lease_lost ? "lease_lost" : ec.message().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc == 3 && std::string(argv[1]) == "--hold") return hold_main(argv[2]);
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url);
  std::printf("lease %lld ms (renewed every %lld ms), client 1's work %lld ms\n",
              static_cast<long long>(lease.count()), static_cast<long long>((lease / 3).count()),
              static_cast<long long>(work.count()));

  dlock::test::child_process holder("/proc/self/exe", {"--hold", target.url});
  auto expect = [&](const std::string& word) {
    auto line = holder.read_line(scaled(20s));
    if (line.rfind(word + " ", 0) != 0) throw std::runtime_error("client 1 said '" + line + "', not " + word);
    return line.substr(word.size() + 1);
  };
  std::istringstream acquired(expect("acquired"));
  long long started = 0;
  std::uint64_t token_1 = 0;
  acquired >> started >> token_1;
  dlock::examples::fenced_store store;
  ::kill(holder.pid(), SIGSTOP);
  const auto stopped = monotonic_ns();
  std::printf("client 1 (pid %d): took the lock; stopped with SIGSTOP\n", static_cast<int>(holder.pid()));

  dlock::test::hold_history history;
  dlock::Lock<> lock(redis, key, fenced(), dlock::renewal::Watchdog{lease});
  auto hold = lock.try_acquire_for(lease * 3);
  if (!hold) {
    std::printf("unexpected: client 2 never got the lock of the stopped client 1\n");
    std::printf("verdict: the lease of a stopped holder did not end\n");
    return 1;
  }
  const auto mine = monotonic_ns();
  std::printf("client 2: got the lock %lld ms after client 1 was stopped (its lease ran out)\n", ms(mine - stopped));
  ::kill(holder.pid(), SIGCONT);
  std::printf("client 1: resumed with SIGCONT, goes on with its critical section\n");
  const auto token_2 = hold->fencing_token().value_or(0);
  const bool written_2 = store.write(token_2, "client 2's work");
  std::printf("client 2: wrote to the store with fencing token %llu: %s\n",
              static_cast<unsigned long long>(token_2), written_2 ? "accepted" : "refused");
  std::this_thread::sleep_for(lease / 2);  // client 2's critical section
  history.add({key, "client-2", mine, monotonic_ns()});
  hold->release();

  std::istringstream end(expect("end"));
  long long ended = 0, lost_at = 0;
  end >> ended >> lost_at;
  history.add({key, "client-1", started, ended});
  // Client 1's work ends with a write, carrying the token it got.
  const bool written_1 = store.write(token_1, "client 1's late work");
  std::printf("client 1: its late write to the store, with fencing token %llu: %s\n",
              static_cast<unsigned long long>(token_1),
              written_1 ? "accepted (it overwrote client 2's work)" : "refused (the store has seen a newer token)");
  const auto released = expect("released");
  if (lost_at)
    std::printf("client 1: its loss signal fired %lld ms after it was stopped, %lld ms after client 2 got in:\n"
                "          a stopped process runs no timer\n",
                ms(lost_at - stopped), ms(lost_at - mine));
  std::printf("client 1: its release said: %s\n", released.c_str());
  auto overlaps = history.overlaps();
  if (!overlaps.empty())
    std::printf("OVERLAP: both critical sections ran at once for %lld ms\n", ms(overlaps.front().overlap_ns()));
  holder.wait();

  std::printf("\nWhat it teaches: a lease, renewed or not, is a promise the holder keeps only while\n"
              "it runs. A stopped process cannot renew, cannot hear its loss signal, and cannot\n"
              "stop its work in time: when it resumes, it acts as the holder. No lock can\n"
              "prevent that on the client side. The fix lives in the protected resource: each\n"
              "acquisition gets a fencing token (a number that only grows), every write carries\n"
              "it, and the resource refuses a write with an older token than one it has seen.\n"
              "Here the store kept client 2's work: \"%s\".\n",
              store.value().c_str());
  bool as_designed = !overlaps.empty() && released == "lease_lost" && token_2 > token_1 && written_2 && !written_1;
  if (!as_designed)
    std::printf("unexpected: the paused holder should overlap client 2, hear lease_lost at release, and have its "
                "late write refused\n");
  if (overlaps.empty())
    std::printf("verdict: the paused holder did not overlap the next holder\n");
  else
    std::printf("verdict: the paused holder's critical section overlapped the next holder's; its release said %s; "
                "the store %s its late write\n",
                released.c_str(), written_1 ? "accepted" : "refused");
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "paused_holder: %s\n", e.what());
  return 2;
}
