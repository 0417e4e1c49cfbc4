// Seed 003's failover story (A4f) as a function: one act on a Sentinel
// deployment the caller started (a master, replicas behind fault proxies,
// sentinels). Used by examples/failover_sentinel and by dlock-compare's
// fault row.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <dlock/backend/sentinel.hpp>
#include <dlock/dlock.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include <support/sentinel_deployment.hpp>

#include "fenced_store.hpp"

namespace dlock::examples::failover_story {

using namespace std::chrono_literals;

using StoryLock = dlock::Lock<dlock::SentinelBackend, dlock::ownership::Token, dlock::renewal::Watchdog,
                              dlock::wait::Spin>;

enum class act { reproduced, prevented, fenced };

struct outcome {
  bool a_held = false;       // A's acquire succeeded
  std::string a_refusal;     // why not, when it did not
  bool b_held = false;       // B got the lock on the new master
  bool overlap = false;      // the hold-history checker found A and B at once
  bool late_write_refused = false;
  std::uint64_t a_token = 0, b_token = 0;
  long long failover_ms = 0;  // from the kill to B's lock
  // When each thing happened (CLOCK_MONOTONIC ns; 0: it did not), for
  // dlock-compare's timeline of the story.
  struct stamps {
    std::int64_t start = 0, a_answered = 0, kill = 0, promoted = 0, b_start = 0, b_write = 0, b_end = 0,
                 a_late_write = 0, a_end = 0;
  } at;
};

// Prevented: SentinelBackend's default, which acknowledges a token lock's
// writes. The other acts turn acknowledgement off, as `?acknowledge=off`
// in the URL would.
inline dlock::redis::sentinel_config settings(const test::sentinel_deployment& d, act which) {
  auto cfg = dlock::redis::parse_sentinel_url(d.url());
  if (which != act::prevented) cfg.master.acknowledge = dlock::redis::replica_ack{.replicas = dlock::redis::replica_ack::none};
  return cfg;
}

inline dlock::ownership::Token ownership(act which) {
  dlock::ownership::Token o;
  if (which == act::fenced) o.fencing = dlock::fencing_tokens{};
  return o;
}

inline outcome run(act which, test::sentinel_deployment& d) {
  outcome out;
  dlock::SentinelBackend a_side(settings(d, which)), b_side(settings(d, which));
  const auto lease = test::scaled(30s);  // A's first renewal is 10 s away: it hears nothing before B is in
  StoryLock a(a_side, "story", ownership(which), dlock::renewal::Watchdog{lease});
  StoryLock b(b_side, "story", ownership(which), dlock::renewal::Watchdog{lease});
  test::hold_history history;
  fenced_store store;

  d.hold_replication();
  std::error_code ec;
  out.at.start = test::monotonic_ns();
  auto a_hold = a.try_acquire(ec);
  const auto a_start = out.at.a_answered = test::monotonic_ns();
  out.a_held = a_hold.has_value();
  if (!a_hold) out.a_refusal = ec.message();
  if (a_hold) out.a_token = a_hold->fencing_token().value_or(0);

  const auto old_port = d.node(0).port();
  const auto killed = std::chrono::steady_clock::now();
  out.at.kill = test::monotonic_ns();
  d.node(0).kill();
  d.lose_held_replication();  // what the replicas never got dies with the master
  // Sentinel tries a failover that it aborted (on a loaded machine, say, a
  // replica whose INFO came late) again only after twice its failover
  // timeout (60 s here): wait past that rather than fail the story. (Once
  // in a loaded test run the default 30 s passed without a new master.)
  d.wait_for_new_master(old_port, std::chrono::seconds(130));
  out.at.promoted = test::monotonic_ns();
  auto b_hold = b.try_acquire_for(test::scaled(20s), ec);
  out.b_held = b_hold.has_value();
  if (!b_hold) return out;
  out.failover_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count();
  const auto b_start = out.at.b_start = test::monotonic_ns();
  out.b_token = b_hold->fencing_token().value_or(0);
  std::this_thread::sleep_for(test::scaled(300ms));  // B's work, then its write
  out.at.b_write = test::monotonic_ns();
  store.write(out.b_token, "B's work");
  const auto both = out.at.b_end = test::monotonic_ns();
  b_hold->release(ec);
  if (a_hold) {
    history.add({"story", "A", a_start, both});
    // A, still believing it holds the lock, writes its work late.
    out.at.a_late_write = test::monotonic_ns();
    out.late_write_refused = !store.write(out.a_token, "A's late work");
    out.at.a_end = test::monotonic_ns();
    a_hold->release(ec);  // lease_lost: B took and released the key
  }
  history.add({"story", "B", b_start, both});
  out.overlap = !history.overlaps().empty();
  return out;
}

/// The three acts' counts over a number of runs.
struct tally {
  int runs = 0;
  int overlaps[3] = {};      ///< by act: two holders at once
  int a_refused[3] = {};     ///< A's acquire refused
  int b_alone[3] = {};       ///< B got the lock and was the only holder
  int late_refused[3] = {};  ///< A's late write refused by the store
  std::vector<long long> failover_ms;  ///< from each kill to B's lock

  /// What the story promises: the overlap in every reproduced run, never
  /// with acknowledgement (B alone each time), and A's late write refused
  /// in every fenced run.
  bool as_designed() const {
    return runs > 0 && overlaps[0] == runs && overlaps[1] == 0 && b_alone[1] == runs && overlaps[2] == runs &&
           late_refused[2] == runs;
  }
};

inline constexpr act acts[] = {act::reproduced, act::prevented, act::fenced};

/// Runs the three acts `repeat` times, each run's three side by side on
/// deployments of their own; `each(act, outcome)` sees every outcome.
template <class Each>
tally run_all(int repeat, Each&& each) {
  tally t;
  for (int r = 0; r < repeat; ++r) {
    std::vector<std::future<outcome>> runs;
    for (auto which : acts)
      runs.push_back(std::async(std::launch::async, [which] {
        test::sentinel_deployment d;
        return run(which, d);
      }));
    for (int i = 0; i < 3; ++i) {
      auto o = runs[static_cast<std::size_t>(i)].get();
      each(acts[i], o);
      t.overlaps[i] += o.overlap;
      t.a_refused[i] += !o.a_held;
      t.late_refused[i] += o.late_write_refused;
      t.b_alone[i] += o.b_held && !o.overlap;
      if (o.b_held) t.failover_ms.push_back(o.failover_ms);
    }
    ++t.runs;
  }
  return t;
}

}  // namespace dlock::examples::failover_story
