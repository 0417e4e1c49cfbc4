// Seed 003's failover story (A4f), in three acts, each on a Sentinel
// deployment of its own that this program starts on free loopback ports: a
// master, two replicas that follow it through fault proxies (so replication
// can be held back), and three sentinels.
//
// In every act, client A takes lock "story" while replication is held back,
// the master is killed (SIGKILL) with the write its replicas never got, and
// Sentinel promotes a replica. Then client B asks for the same lock.
// 1. reproduced: acknowledgement turned off (?acknowledge=off), nothing
//    protects the lock; B gets it on the new master while A still believes
//    it holds it: two holders.
// 2. prevented: SentinelBackend's default, replica acknowledgement (WAIT
//    behind every lock write); A's acquire is refused (no replica had it)
//    and its write given back; B is the only holder there ever was.
// 3. fenced: fencing tokens are on, acknowledgement off; the overlap still
//    happens, but B's token is higher, and the store that A and B write to
//    refuses A's late write.
// The three deployments start side by side; each act takes one failover.
//
//   failover_sentinel [--repeat N]     (N runs of each act, counted)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <dlock/backend/sentinel.hpp>
#include <dlock/dlock.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include <support/sentinel_deployment.hpp>
#include "failover_story.hpp"

using namespace std::chrono_literals;
using dlock::test::monotonic_ns;
using dlock::test::scaled;

namespace {

using namespace dlock::examples::failover_story;

const char* name(act which) {
  switch (which) {
    case act::reproduced: return "reproduced";
    case act::prevented: return "prevented";
    case act::fenced: return "fenced";
  }
  return "?";
}

void tell(act which, const outcome& o) {
  std::printf("\n%s:\n", name(which));
  if (o.a_held)
    std::printf("  A took the lock on the master (replication held back)%s\n",
                o.a_token ? (", fencing token " + std::to_string(o.a_token)).c_str() : "");
  else
    std::printf("  A's acquire was refused: %s\n", o.a_refusal.c_str());
  std::printf("  the master was killed; Sentinel promoted a replica that never got A's write\n");
  if (!o.b_held) {
    std::printf("  B did not get the lock on the new master\n");
    return;
  }
  std::printf("  B took the lock on the new master, %lld ms after the kill%s\n", o.failover_ms,
              o.b_token ? (", fencing token " + std::to_string(o.b_token)).c_str() : "");
  std::printf("  %s\n", o.overlap ? "OVERLAP: A and B held the lock at the same time"
                                  : "no overlap: B was the only holder");
  if (o.a_held && o.a_token)
    std::printf("  A's late write to the store: %s\n", o.late_write_refused ? "refused (older token)" : "accepted");
}

}  // namespace

int main(int argc, char** argv) try {
  int repeat = 1;
  if (argc == 3 && std::string(argv[1]) == "--repeat") repeat = std::stoi(argv[2]);
  else if (argc != 1) {
    std::fprintf(stderr, "usage: failover_sentinel [--repeat N]\n");
    return 2;
  }
  auto t = run_all(repeat, [&](act which, const outcome& o) {
    if (repeat == 1) tell(which, o);
  });
  const auto& overlaps = t.overlaps;
  const auto& refused_a = t.a_refused;
  const auto& b_alone = t.b_alone;
  const auto& late_refused = t.late_refused;
  const auto& failover_ms = t.failover_ms;
  std::printf("\nover %d run%s of each act:\n", repeat, repeat == 1 ? "" : "s");
  std::printf("  reproduced: two holders in %d\n", overlaps[0]);
  std::printf("  prevented:  two holders in %d (A refused in %d, B the only holder in %d)\n", overlaps[1],
              refused_a[1], b_alone[1]);
  std::printf("  fenced:     two holders in %d, A's late write refused in %d\n", overlaps[2], late_refused[2]);
  if (!failover_ms.empty()) {
    auto [lo, hi] = std::minmax_element(failover_ms.begin(), failover_ms.end());
    std::printf("  from the kill to B's lock: %lld to %lld ms\n", *lo, *hi);
  }
  std::printf("\nWhat it teaches: Redis replicates after it answers, so a lock written on a master\n"
              "can die with it, and Sentinel promotes a replica that never saw it. Replica\n"
              "acknowledgement (WAIT) makes a lock count only once replicas have it; fencing\n"
              "tokens let the protected resource refuse the holder that lost its lock.\n");
  const bool as_designed = t.as_designed();
  if (!as_designed) std::printf("unexpected: see the counts above\n");
  std::printf("verdict: reproduced %d/%d, prevented %d/%d, fenced %d/%d: without acknowledgement the lock was "
              "granted twice; with it, A's write was given back and B held alone; with fencing, A's late write "
              "was refused\n",
              overlaps[0], repeat, b_alone[1], repeat, late_refused[2], repeat);
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "failover_sentinel: %s\n", e.what());
  return 2;
}
