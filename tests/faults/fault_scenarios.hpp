// The fault suite's scenarios, each a template over a backend fixture F
// (tests/lock/backend_fixtures.hpp) and a lock type L, each bounded in time
// and ending with the hold-history checker's verdict. Instantiated per
// backend by FAULT_SCENARIOS (one file each, so that they build in
// parallel). docs/faults.md has the table of fault x backend.
#pragma once

#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "../../examples/fenced_store.hpp"
#include "fault_support.hpp"

namespace dlock::test::faults {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

inline std::int64_t ns(milliseconds d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

/// Fault 1: several processes take and release a few locks at random with
/// short leases; no two holds of a lock overlap.
template <class F, class L>
void churn_scenario() {
  F redis;
  log_folder logs;
  churn_plan plan{.prefix = "churn:" + L::combination_name(), .locks = 2, .lease = scaled(2s),
                  .length = scaled(1500ms), .log = {}};
  churn_crowd crowd(logs, redis.worker_spec(), L::combination_name(), plan, 3);
  REQUIRE(crowd.started() == 3);
  CHECK(crowd.finish(plan.length + scaled(20s)) == 3);
  auto log = crowd.log();
  WARN(L::combination_name() << ": " << log.holds << " holds by 3 processes on 2 locks, "
                             << log.history.overlaps().size() << " overlapping, " << log.expected.size()
                             << " outcome_unknown or no_quorum");
  CHECK(log.done == 3);
  INFO(log.errors.size() << " errors, the first: " << (log.errors.empty() ? "" : log.errors.front()));
  CHECK(log.errors.empty());
  CHECK(log.open.empty());
  CHECK(log.holds >= 10);  // it churned
  auto overlaps = log.history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
}

/// Fault 2: a holder is killed (SIGKILL) while two other processes wait for
/// its lock. The lock frees within its lease (plus one renewal period
/// under the watchdog, whose last renewal may just have run), never
/// before the key's time to live, read just before the kill, has run out,
/// and the killed hold overlaps no other.
template <class F, class L>
void killed_holder_scenario() {
  static_assert(has_lease<L>);
  F redis;
  log_folder logs;
  const auto lease = scaled(1200ms);
  constexpr bool watchdog = L::renewal_type::renews;
  churn_plan plan{.prefix = "killed:" + L::combination_name(), .locks = 1, .lease = lease, .length = lease * 3,
                  .log = {}};
  const std::string name = plan.lock_name(0);
  worker holder({"hold", redis.worker_spec(), L::combination_name(), name, std::to_string(lease.count())});
  REQUIRE(holder.read_line() == "acquired");
  const auto acquired = monotonic_ns();
  churn_crowd crowd(logs, redis.worker_spec(), L::combination_name(), plan, 2);
  REQUIRE(crowd.started() == 2);
  std::this_thread::sleep_for(lease / 2);
  // The key's time to live, just before the kill: it cannot end before
  // `asked` + pttl (a lock whose key under its name has none, a
  // semaphore's, falls back to a bound from the lease).
  const auto asked = monotonic_ns();
  long long pttl = std::stoll(redis.command(name, {"PTTL", name}));
  if constexpr (requires { redis.nodes; }) {  // a quorum: not before its first node's key ends (a majority needs more)
    for (auto& node : redis.nodes) pttl = std::min(pttl, std::stoll(node->command({"PTTL", name})));
  }
  const auto killed = monotonic_ns();
  holder.kill();
  CHECK(crowd.finish(plan.length + scaled(20s)) == 2);
  auto log = crowd.log();
  log.history.add(hold_span{name, "killed-holder", acquired, killed, false});
  std::int64_t first = 0;
  for (auto& s : log.history.spans())
    if (s.worker != "killed-holder" && (first == 0 || s.start_ns < first)) first = s.start_ns;
  REQUIRE(first != 0);  // someone took it after the kill
  const auto freed_after = milliseconds((first - killed) / 1'000'000);
  WARN(L::combination_name() << ": killed holder's lock taken again " << freed_after.count() << " ms after the kill ("
                             << log.holds << " holds checked)");
  // Never sooner: not before the key's end, where the server says when
  // that is; else not before a third of the lease (the kill came half a
  // lease after the acquire; the watchdog renewed meanwhile).
  const std::int64_t earliest = pttl > 0 ? asked + ns(milliseconds(pttl)) - ns(2ms) : killed + ns(lease / 3);
  // The key ends by kill + lease (a renewal just before the kill sets it
  // so); the rest is slack for a loaded machine.
  const auto latest = lease + (watchdog ? lease / 3 : 0ms) + scaled(500ms);
  INFO("PTTL " << pttl << " ms before the kill");
  CHECK(first >= earliest);                 // never sooner
  CHECK(first - killed <= ns(latest));      // within its lease
  INFO(log.errors.size() << " errors, the first: " << (log.errors.empty() ? "" : log.errors.front()));
  CHECK(log.errors.empty());
  auto overlaps = log.history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
}

/// Faults 3 and 4: a holder is paused (SIGSTOP) past its lease, another
/// client takes the lock meanwhile, and the holder resumes and ends its
/// hold. The overlap is reported, never hidden: the checker finds exactly
/// the one between the two holds, and the paused holder, asked when it
/// resumes, knows its lease is over (time left 0). Its late release leaves
/// the new owner's lock alone (lease_lost), which the new owner then still
/// holds and releases without error. Both hold with fencing tokens (where
/// the ownership has them): a fenced store (examples/fenced_store.hpp)
/// that took the new owner's write refuses the paused holder's late write,
/// made with the token the holder reports when it resumes.
template <class F, class L>
void paused_holder_scenario() {
  F redis;
  const auto lease = scaled(1200ms);
  const std::string name = "paused:" + L::combination_name();
  child_process holder(worker_path(), {"fenced-pause-hold", redis.worker_spec(), L::combination_name(), name,
                                       std::to_string(lease.count())}, true);
  const auto acquired = holder.read_line();
  INFO("the holder said: \"" << acquired << "\" (nothing: it failed; its error is on the test's stderr)");
  REQUIRE(acquired.rfind("acquired ", 0) == 0);
  ::kill(holder.pid(), SIGSTOP);
  auto lock = make_lock<L>(redis.backend, name, lease, fenced_ownership<L>());
  auto hold = take_within(*lock, lease * 4);  // once the stopped holder's key ends
  REQUIRE(hold);
  hold_history history;
  const auto taken = monotonic_ns();
  constexpr bool fenced = requires(typename L::ownership_type o) { o.fencing = fencing_tokens{}; };
  examples::fenced_store store;
  const auto new_token = hold->fencing_token();
  CHECK(new_token.has_value() == fenced);
  if (new_token) CHECK(store.write(*new_token, "the new owner's"));
  std::this_thread::sleep_for(lease / 4);  // the new owner works a while before the old one wakes
  ::kill(holder.pid(), SIGCONT);
  REQUIRE(holder.write("go\n"));
  bool complete = false;
  const auto rest = holder.read_rest(scaled(20s), complete);
  INFO("the paused holder said: " << rest);
  REQUIRE(complete);
  CHECK(history.add_lines(rest) == 1);
  CHECK(rest.find("remaining 0\n") != std::string::npos);       // it knows its lease ended
  CHECK(rest.find("release lease_lost\n") != std::string::npos);  // and its release touched nothing
  const auto token_at = rest.find("token ");
  REQUIRE(token_at != std::string::npos);
  const auto holder_token = rest.substr(token_at + 6, rest.find('\n', token_at) - token_at - 6);
  if (new_token) {
    // Its late write, with the token it holds, is refused: the store has
    // seen a later one.
    REQUIRE(holder_token != "none");
    CHECK(std::stoull(holder_token) < *new_token);
    CHECK_FALSE(store.write(std::stoull(holder_token), "the paused holder's late"));
    CHECK(store.value() == "the new owner's");
  }
  CHECK_FALSE(hold->lost());
  history.add(hold_span{name, "new-owner", taken, monotonic_ns(), false});
  std::error_code ec;
  hold->release(ec);
  CHECK(!ec);  // the new owner's lock was still there, and its own
  auto overlaps = history.overlaps();
  WARN(L::combination_name() << ": a holder paused past its lease overlapped the next by "
                             << (overlaps.empty() ? 0 : overlaps.front().overlap_ns() / 1'000'000)
                             << " ms, reported; its late write " << (new_token ? "refused" : "not fenced")
                             << " (token " << holder_token << ", the new owner's "
                             << (new_token ? std::to_string(*new_token) : "none") << ")");
  INFO(describe(overlaps));
  REQUIRE(overlaps.size() == 1);
  CHECK(overlaps.front().earlier.worker == "paused-holder");
  CHECK(holder.wait() == 0);
}

}  // namespace dlock::test::faults

// Every scenario above for every owner-checked representative lock on the
// backend of FIXTURE (its worker_spec() names the same servers to
// lock_worker), tagged TAG.
#define FAULT_SCENARIOS(FIXTURE, BACKEND, TAG)                                                                  \
  TEMPLATE_LIST_TEST_CASE("fault 1: churning processes never overlap", "[faults][" TAG "]",                    \
                          dlock::combinations::acknowledgeable_t<BACKEND>) {                                   \
    dlock::test::faults::churn_scenario<FIXTURE, TestType>();                                                  \
  }                                                                                                           \
  TEMPLATE_LIST_TEST_CASE("fault 2: a killed holder's lock frees within its lease and never sooner",          \
                          "[faults][" TAG "]", dlock::combinations::acknowledgeable_t<BACKEND>) {              \
    dlock::test::faults::killed_holder_scenario<FIXTURE, TestType>();                                          \
  }                                                                                                           \
  TEMPLATE_LIST_TEST_CASE("faults 3 and 4: a paused holder's overlap is reported and its late release is void", \
                          "[faults][" TAG "]", dlock::combinations::acknowledgeable_t<BACKEND>) {              \
    dlock::test::faults::paused_holder_scenario<FIXTURE, TestType>();                                          \
  }
