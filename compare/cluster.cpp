#include "cluster.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <dlock/backend/cluster.hpp>
#include <dlock/combinations.hpp>
#include <dlock/dlock.hpp>
#include <lock/backend_instances.hpp>  // every combination on each backend, compiled once
#include <support/hold_history.hpp>
#include <support/redis_server.hpp>

#include "contend_here.hpp"
#include "contention.hpp"
#include "measure.hpp"
#include "options.hpp"

namespace dlock::compare {

namespace {

using std::chrono::milliseconds;

// Every key of the phase carries this hash tag: on the cluster they all
// live on one master (the one the uncontended phase pins), and one server
// gets the very same names.
const std::string tag = "{cmp}:";

// `c`'s URL with replica acknowledgement (on by default) off: the phase
// measures the lock's own cycle and commands (docs/cluster.md).
std::string unacknowledged(const test::redis_cluster& c) { return c.url() + "?acknowledge=off"; }

// What the cluster's nodes have done so far: commands the masters ran, and
// pub/sub messages every node sent over the cluster bus.
struct cluster_counts {
  std::int64_t master_commands = 0, bus_messages = 0;
};

cluster_counts count(test::redis_cluster& c, const std::vector<std::size_t>& masters) {
  cluster_counts k;
  for (auto m : masters) k.master_commands += total_calls(c.node(m).command({"INFO", "commandstats"}));
  for (std::size_t i = 0; i < c.nodes(); ++i) {
    auto info = c.node(i).command({"CLUSTER", "INFO"});
    k.bus_messages += static_cast<std::int64_t>(info_number(info, "cluster_stats_messages_publish_sent") +
                                                info_number(info, "cluster_stats_messages_publishshard_sent"));
  }
  return k;
}

// The servers of the phase: one server; three masters with a replica
// each; the same without replicas (what the replicas cost); one master
// alone (many locks).
struct servers {
  test::redis_server single_server;
  test::redis_cluster cluster{test::cluster_options{.masters = 3, .replicas_per_master = 1}};
  test::redis_cluster bare{test::cluster_options{.masters = 3}};
  test::redis_cluster one_master{test::cluster_options{.masters = 1}};
  RedisBackend single{single_server.url()};
  // Without replica acknowledgement (on by default): the cycle and the
  // commands measured here are the lock's own (docs/cluster.md).
  ClusterBackend clustered{unacknowledged(cluster)};
  ClusterBackend bare_clustered{unacknowledged(bare)};
  std::size_t tagged_master = cluster.master_of_slot(dlock::detail::key_slot(tag));
  std::size_t bare_tagged_master = bare.master_of_slot(dlock::detail::key_slot(tag));
};

template <class L>
using on_cluster = Lock<ClusterBackend, typename L::ownership_type, typename L::renewal_type, typename L::wait_type>;

// One combination (L on one server): its uncontended cycle there and on the
// cluster, in alternating blocks.
template <class L>
cluster_row uncontended_pair(servers& s, const cluster_plan& plan) {
  cluster_row row;
  row.name = L::combination_name();
  const std::string key = tag + "uncontended:" + row.name;
  L one(s.single, key);
  on_cluster<L> many(s.clustered, key);
  on_cluster<L> bare(s.bare_clustered, key);
  std::vector<double> a, b, c, warm;
  timed_cycles(one, 5, warm);
  timed_cycles(many, 5, warm);
  timed_cycles(bare, 5, warm);
  for (int pair = 0; pair < plan.pairs; ++pair) {
    const int k = plan.cycles / plan.pairs + (pair < plan.cycles % plan.pairs ? 1 : 0);
    auto base = timed_cycles(one, k, a);
    row.cycle_pairs.push_back(timed_cycles(many, k, b) / base);
    row.bare_cycle_pairs.push_back(timed_cycles(bare, k, c) / base);
  }
  row.single = percentiles(a);
  row.cluster = percentiles(b);
  row.bare_cluster = percentiles(c);
  return row;
}

// The same combination contended, in runs that alternate one server and the
// cluster (A B, then B A: a drift in the machine's speed favours neither).
template <class L>
void contended_pairs(servers& s, const cluster_plan& plan, cluster_row& row) {
  row.workers = plan.handoff_workers;
  const std::string single_url = s.single_server.url(), cluster_url = unacknowledged(s.cluster);
  make_fn<RedisBackend> make_single = [&] { return std::make_unique<RedisBackend>(single_url); };
  make_fn<ClusterBackend> make_cluster = [&] { return std::make_unique<ClusterBackend>(cluster_url); };
  for (int pair = 0; pair < plan.contended_pairs; ++pair) {
    const std::string key = tag + "contended:" + row.name + ":" + std::to_string(pair);
    auto run_single = [&] {
      row.single_contended = contend_here<L>(make_single, s.single, key, row.workers, plan.contention);
    };
    auto run_cluster = [&] {
      row.cluster_contended = contend_here<on_cluster<L>>(make_cluster, s.clustered, key, row.workers, plan.contention);
    };
    if (pair % 2 == 0) run_single(), run_cluster();
    else run_cluster(), run_single();
    auto& one = row.single_contended;
    auto& many = row.cluster_contended;
    if (one.handoffs_per_s > 0) row.handoff_rate_pairs.push_back(many.handoffs_per_s / one.handoffs_per_s);
    if (one.handoff.p50_us > 0) row.handoff_latency_pairs.push_back(many.handoff.p50_us / one.handoff.p50_us);
    row.cluster_overlaps += many.overlaps;
    row.cluster_errors += many.errors;
  }
}

// CPU seconds (user and system) each master of `c` has used so far.
std::vector<double> cpu_seconds(test::redis_cluster& c) {
  std::vector<double> out;
  for (auto m : c.masters()) {
    auto info = c.node(m).command({"INFO", "cpu"});
    out.push_back(info_number(info, "used_cpu_user") + info_number(info, "used_cpu_sys"));
  }
  return out;
}

// Many locks: plan.many_workers threads over plan.many_backends backends of
// cluster `c`, each thread lock()ing and unlock()ing a lock of its own.
// Returns the cycles per second; `busiest` gets the busiest master's CPU
// time over the run's wall time.
double many_locks(test::redis_cluster& c, const std::vector<std::string>& names, const cluster_plan& plan,
                  std::size_t& errors, std::vector<double>& busiest) {
  const auto url = unacknowledged(c);
  std::vector<std::unique_ptr<ClusterBackend>> backends;
  for (int i = 0; i < plan.many_backends; ++i) backends.push_back(std::make_unique<ClusterBackend>(url));
  std::vector<std::unique_ptr<Lock<ClusterBackend>>> locks;
  for (std::size_t i = 0; i < names.size(); ++i)
    locks.push_back(std::make_unique<Lock<ClusterBackend>>(*backends[i % backends.size()], names[i]));
  for (auto& l : locks) l->lock(), l->unlock();  // connections up, scripts loaded
  std::vector<std::size_t> done(names.size());
  std::vector<std::size_t> failed(names.size());
  std::latch go(1);
  std::int64_t end = 0;
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i < names.size(); ++i) {
    pool.emplace_back([&, i] {
      go.wait();
      while (test::monotonic_ns() < end) {
        try {
          locks[i]->lock();
          locks[i]->unlock();
          ++done[i];
        } catch (const std::exception& e) {
          if (failed[i]++ == 0) std::fprintf(stderr, "  many locks: %s: %s\n", names[i].c_str(), e.what());
        }
      }
    });
  }
  const auto cpu_before = cpu_seconds(c);
  const auto t0 = test::monotonic_ns();
  end = t0 + std::chrono::nanoseconds(plan.contention).count();
  go.count_down();
  for (auto& t : pool) t.join();
  const double seconds = static_cast<double>(test::monotonic_ns() - t0) / 1e9;
  const auto cpu_after = cpu_seconds(c);
  double most = 0;
  for (std::size_t m = 0; m < cpu_after.size() && m < cpu_before.size(); ++m)
    most = std::max(most, (cpu_after[m] - cpu_before[m]) / seconds);
  busiest.push_back(most);
  std::size_t total = 0;
  for (std::size_t i = 0; i < names.size(); ++i) total += done[i], errors += failed[i];
  return static_cast<double>(total) / seconds;
}

many_locks_row many_locks_phase(servers& s, const cluster_plan& plan) {
  std::fprintf(stderr, "cluster: many locks, one master against three\n");
  auto& one = s.one_master;
  auto& three = s.bare;
  many_locks_row row;
  row.combination = Lock<ClusterBackend>::combination_name();
  row.workers = plan.many_workers;
  row.backends = plan.many_backends;
  // One name per worker, dealt to the three masters in turn.
  std::vector<std::string> names;
  {
    ClusterBackend probe(unacknowledged(three));
    auto masters = probe.masters();
    std::sort(masters.begin(), masters.end(), [](auto& a, auto& b) { return a.port < b.port; });
    for (int k = 0; static_cast<int>(names.size()) < plan.many_workers; ++k) {
      auto name = "many:" + std::to_string(k);
      if (probe.master_of(name) == masters.at(names.size() % masters.size())) names.push_back(name);
    }
  }
  for (int pair = 0; pair < plan.pairs; ++pair) {
    auto run_one = [&] {
      row.one_master_per_s.push_back(many_locks(one, names, plan, row.errors, row.one_master_busiest_cpu));
    };
    auto run_three = [&] {
      row.three_masters_per_s.push_back(many_locks(three, names, plan, row.errors, row.three_masters_busiest_cpu));
    };
    if (pair % 2 == 0) run_one(), run_three();
    else run_three(), run_one();
    row.pairs.push_back(row.three_masters_per_s.back() / row.one_master_per_s.back());
  }
  return row;
}

// Pub/sub waiting, sharded and classic, on the cluster of `s`.
std::vector<pubsub_row> pubsub_phase(servers& s, const cluster_plan& plan) {
  using O = ownership::ReentrantHash;  // the ownership whose releases publish
  using W = wait::PubSub;
  using L = Lock<ClusterBackend, O, combinations::detail::representative_renewal<O, W>, W>;
  auto masters = s.cluster.masters();
  std::vector<pubsub_row> out;
  for (int workers : plan.pubsub_workers) {
    for (bool sharded : {true, false}) {
      auto cfg = redis::parse_cluster_url(unacknowledged(s.cluster));
      cfg.sharded_pubsub = sharded;
      ClusterBackend control(cfg);
      make_fn<ClusterBackend> make = [&] { return std::make_unique<ClusterBackend>(cfg); };
      pubsub_row row;
      row.combination = L::combination_name();
      row.mode = sharded ? "sharded" : "classic";
      row.workers = workers;
      std::fprintf(stderr, "cluster: pub/sub waiting, %s, %d workers\n", row.mode.c_str(), workers);
      const std::string key = tag + "pubsub:" + row.mode + ":" + std::to_string(workers);
      auto before = count(s.cluster, masters);
      auto r = contend_here<L>(make, control, key, workers, plan.contention);
      auto after = count(s.cluster, masters);
      row.cycles = r.cycles;
      row.cycles_per_s = r.cycles_per_s;
      row.errors = r.errors;
      if (r.cycles) {
        // Left out: the critical section's GET and SET, the counter's SET
        // and GET around the run, and one INFO per master for `before`.
        auto other = static_cast<std::int64_t>(2 * r.cycles + 2 + masters.size());
        row.commands_per_acquisition = static_cast<double>(after.master_commands - before.master_commands - other) /
                                       static_cast<double>(r.cycles);
        row.bus_messages_per_acquisition =
            static_cast<double>(after.bus_messages - before.bus_messages) / static_cast<double>(r.cycles);
      }
      out.push_back(row);
    }
  }
  return out;
}

}  // namespace

cluster_result run_cluster(const cluster_plan& plan) {
  std::fprintf(stderr,
               "cluster: starting a private redis-server and clusters of 3 masters with a replica each, 3 masters, "
               "and 1 master\n");
  servers s;
  cluster_result result;
  {
    // Pinned as the other uncontended phases: the client with the one
    // server, and with the master of the tagged slot, so that both sides of
    // each ratio cross (or do not cross) CPUs the same way.
    test::pinned pin_single(plan.placement, s.single_server.pid());
    test::pinned pin_master(plan.placement, s.cluster.node(s.tagged_master).pid());
    test::pinned pin_bare(plan.placement, s.bare.node(s.bare_tagged_master).pid());
    result.deployment = "3 masters with a replica each, and 3 masters without, on this machine (many locks: 1 "
                        "master against the 3 without replicas); the uncontended phase's placement " +
                        std::string(test::placement_name(plan.placement)) + " (" + pin_single.describe() +
                        "; each cluster's master: " + pin_master.describe() + ")";
    combinations::for_each([&](auto type) {
      using L = typename decltype(type)::type;
      if (!matches(plan.filter, L::combination_name())) return;
      std::fprintf(stderr, "cluster: %s, %d cycles on each\n", L::combination_name().c_str(), plan.cycles);
      try {
        result.rows.push_back(uncontended_pair<L>(s, plan));
      } catch (const std::system_error& e) {
        throw std::runtime_error(L::combination_name() + " on the cluster: " + e.what());
      }
    });
  }
  // Contention, unpinned: the workers' threads spread over the CPUs.
  std::size_t i = 0;
  combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(plan.filter, L::combination_name())) return;
    auto& row = result.rows[i++];
    std::fprintf(stderr, "cluster: %s, %d workers for %lld ms, %d runs on each\n", row.name.c_str(),
                 plan.handoff_workers, static_cast<long long>(plan.contention.count()), plan.contended_pairs);
    try {
      contended_pairs<L>(s, plan, row);
    } catch (const std::system_error& e) {
      throw std::runtime_error(row.name + " contended on the cluster: " + e.what());
    }
  });
  result.pubsub = pubsub_phase(s, plan);
  result.many = many_locks_phase(s, plan);
  return result;
}

}  // namespace dlock::compare
