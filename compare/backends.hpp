// dlock-compare's backends phase (--backend sentinel): each combination's
// uncontended cycle on one server and on a Sentinel deployment's master,
// without and with replica acknowledgement, in alternating blocks; and
// seed 003's failover story as a fault row.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <dlock/backend/sentinel.hpp>
#include <dlock/dlock.hpp>

#include "../examples/failover_story.hpp"
#include "measure.hpp"
#include "report.hpp"
#include "story_timelines.hpp"

namespace dlock::compare {

/// The servers of the backends phase: a master with two replicas (which
/// follow it directly, as in production) and one sentinel, and a backend
/// on it without replica acknowledgement (turned off) and with it (the
/// default).
struct sentinel_servers {
  test::sentinel_deployment deployment{test::sentinel_options{.replicas = 2, .sentinels = 1, .quorum = 1,
                                                              .proxied = false}};
  SentinelBackend plain{without_ack(deployment.url())};
  SentinelBackend acknowledged{deployment.url()};  // the default: every connected replica, owner-checked locks

  static redis::sentinel_config without_ack(const std::string& url) {
    auto cfg = redis::parse_sentinel_url(url);
    cfg.master.acknowledge = redis::replica_ack{.replicas = redis::replica_ack::none};
    return cfg;
  }
  static const char* describe() { return "a master with 2 replicas and 1 sentinel on this machine"; }
};

/// L's uncontended cycle (L is a lock on RedisBackend) on `single`, then
/// the same policies on Sentinel, then with acknowledgement (owner-checked
/// ownerships only), in `pairs` rounds of blocks.
template <class L>
backend_row backend_cycles(RedisBackend& single, sentinel_servers& s, const std::string& key, int n, int pairs) {
  using O = typename L::ownership_type;
  using S = Lock<SentinelBackend, O, typename L::renewal_type, typename L::wait_type>;
  L one(single, key + ":single");
  S plain(s.plain, key + ":sentinel");
  std::optional<S> acked;
  if constexpr (O::owner_checked) acked.emplace(s.acknowledged, key + ":acknowledged");
  auto block = [](auto& lock, int k, std::vector<double>& all) { return timed_cycles(lock, k, all); };
  std::vector<double> a, b, c, warm;
  block(one, 5, warm);
  block(plain, 5, warm);
  if (acked) block(*acked, 5, warm);
  backend_row row;
  row.name = L::combination_name();
  for (int pair = 0; pair < pairs; ++pair) {
    const int k = n / pairs + (pair < n % pairs ? 1 : 0);
    auto base = block(one, k, a);
    row.sentinel_pairs.push_back(block(plain, k, b) / base);
    if (acked) row.acknowledged_pairs.push_back(block(*acked, k, c) / base);
  }
  row.single = percentiles(a);
  row.sentinel = percentiles(b);
  if (acked) row.acknowledged = percentiles(c);
  return row;
}

/// Seed 003's story, `runs` times each act, counted.
inline failover_row failover_fault(int runs) {
  namespace story = examples::failover_story;
  failover_row f;
  auto t = story::run_all(runs, [&f](story::act which, const story::outcome& o) {
    if (f.timelines.size() < std::size(story::acts)) f.timelines.push_back(failover_timeline(which, o));
  });
  f.runs = t.runs;
  f.reproduced_overlaps = t.overlaps[0];
  f.prevented_overlaps = t.overlaps[1];
  f.prevented_refused = t.a_refused[1];
  f.prevented_b_alone = t.b_alone[1];
  f.fenced_overlaps = t.overlaps[2];
  f.fenced_late_refused = t.late_refused[2];
  if (!t.failover_ms.empty()) {
    auto [lo, hi] = std::minmax_element(t.failover_ms.begin(), t.failover_ms.end());
    f.kill_to_lock_min_ms = static_cast<double>(*lo);
    f.kill_to_lock_max_ms = static_cast<double>(*hi);
  }
  return f;
}

}  // namespace dlock::compare
