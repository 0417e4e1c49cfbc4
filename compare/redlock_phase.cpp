#include "redlock_phase.hpp"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <system_error>

#include <dlock/backend/redlock.hpp>
#include <dlock/combinations.hpp>
#include <dlock/dlock.hpp>
#include <support/redis_server.hpp>

#include "contend_here.hpp"
#include "contention.hpp"
#include "measure.hpp"
#include "options.hpp"

namespace dlock::compare {

namespace {

// N private servers and the Redlock URL that names them.
struct quorum {
  std::vector<std::unique_ptr<test::redis_server>> nodes;
  explicit quorum(int n) {
    for (int i = 0; i < n; ++i) nodes.push_back(std::make_unique<test::redis_server>());
  }
  std::string url() const {
    std::string out = "redis://";
    for (std::size_t i = 0; i < nodes.size(); ++i) out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(nodes[i]->port());
    return out;
  }
  // Every command the nodes have run so far (INFO commandstats).
  std::int64_t commands() const {
    std::int64_t n = 0;
    for (auto& s : nodes) n += total_calls(s->command({"INFO", "commandstats"}));
    return n;
  }
};

// The servers of the phase: one server, and a deployment of each size,
// with a backend on each (the uncontended cycle's).
struct servers {
  test::redis_server single_server;
  RedisBackend single{single_server.url()};
  std::vector<std::unique_ptr<quorum>> quorums;
  std::vector<std::unique_ptr<RedlockBackend>> backends;
  explicit servers(const std::vector<int>& sizes) {
    for (int n : sizes) {
      quorums.push_back(std::make_unique<quorum>(n));
      backends.push_back(std::make_unique<RedlockBackend>(quorums.back()->url()));
    }
  }
};

template <class L>
using on_single = Lock<RedisBackend, typename L::ownership_type, typename L::renewal_type, typename L::wait_type>;

// One combination (L on a RedlockBackend): its uncontended cycle on one
// server and on each deployment, in alternating blocks.
template <class L>
redlock_row uncontended(servers& s, const redlock_plan& plan) {
  redlock_row row;
  row.name = L::combination_name();
  const std::string key = "redlock:uncontended:" + row.name;
  on_single<L> one(s.single, key);
  std::vector<std::unique_ptr<L>> quorum_locks;
  for (auto& b : s.backends) quorum_locks.push_back(std::make_unique<L>(*b, key));
  std::vector<double> base, warm;
  std::vector<std::vector<double>> sides(quorum_locks.size());
  timed_cycles(one, 5, warm);
  for (auto& l : quorum_locks) timed_cycles(*l, 5, warm);
  row.quorums.resize(quorum_locks.size());
  for (int pair = 0; pair < plan.pairs; ++pair) {
    const int k = plan.cycles / plan.pairs + (pair < plan.cycles % plan.pairs ? 1 : 0);
    auto one_p50 = timed_cycles(one, k, base);
    for (std::size_t q = 0; q < quorum_locks.size(); ++q)
      row.quorums[q].cycle_pairs.push_back(timed_cycles(*quorum_locks[q], k, sides[q]) / one_p50);
  }
  row.single = percentiles(base);
  for (std::size_t q = 0; q < sides.size(); ++q) {
    row.quorums[q].nodes = plan.sizes[q];
    row.quorums[q].cycle = percentiles(sides[q]);
  }
  return row;
}

// Commands per acquisition of a contended run, from the servers' counts
// before and after: the critical section's GET and SET, the counter's SET
// and GET around the run, and the INFO per server that read `before` are
// left out.
double per_acquisition(std::int64_t before, std::int64_t after, const contention_result& r, std::size_t servers) {
  if (!r.cycles) return 0;
  auto other = static_cast<std::int64_t>(2 * r.cycles + 2 + servers);
  return static_cast<double>(after - before - other) / static_cast<double>(r.cycles);
}

std::int64_t commands_of(test::redis_server& s) { return total_calls(s.command({"INFO", "commandstats"})); }

// The same combination contended: runs of one server and of each
// deployment, in an order that turns round every other pair (A B C, then
// C B A: a drift in the machine's speed favours none).
template <class L>
void contended(servers& s, const redlock_plan& plan, redlock_row& row) {
  row.workers = plan.handoff_workers;
  const std::string single_url = s.single_server.url();
  make_fn<RedisBackend> make_single = [&] { return std::make_unique<RedisBackend>(single_url); };
  const std::size_t sides = s.quorums.size();
  for (int pair = 0; pair < plan.contended_pairs; ++pair) {
    const std::string key = "redlock:contended:" + row.name + ":" + std::to_string(pair);
    auto run = [&](std::size_t side) {  // 0: one server; q + 1: deployment q
      if (side == 0) {
        auto before = commands_of(s.single_server);
        row.single_contended = contend_here<on_single<L>>(make_single, s.single, key, row.workers, plan.contention);
        row.single_commands_per_acquisition =
            per_acquisition(before, commands_of(s.single_server), row.single_contended, 1);
        return;
      }
      auto& q = *s.quorums[side - 1];
      auto& out = row.quorums[side - 1];
      const std::string url = q.url();
      make_fn<RedlockBackend> make = [&] { return std::make_unique<RedlockBackend>(url); };
      auto before = q.commands();
      out.contended = contend_here<L>(make, *s.backends[side - 1], key, row.workers, plan.contention);
      out.commands_per_acquisition = per_acquisition(before, q.commands(), out.contended, q.nodes.size());
      out.overlaps += out.contended.overlaps;
      out.errors += out.contended.errors;
    };
    for (std::size_t i = 0; i <= sides; ++i) run(pair % 2 == 0 ? i : sides - i);
    auto& one = row.single_contended;
    for (auto& q : row.quorums) {
      if (one.handoffs_per_s > 0) q.handoff_rate_pairs.push_back(q.contended.handoffs_per_s / one.handoffs_per_s);
      if (one.handoff.p50_us > 0) q.handoff_latency_pairs.push_back(q.contended.handoff.p50_us / one.handoff.p50_us);
    }
  }
}

std::string sizes_text(const std::vector<int>& sizes) {
  std::string out;
  for (std::size_t i = 0; i < sizes.size(); ++i) out += (i ? " and " : "") + std::to_string(sizes[i]);
  return out;
}

}  // namespace

redlock_result run_redlock(const redlock_plan& plan) {
  std::fprintf(stderr, "redlock: starting a private redis-server and Redlock deployments of %s servers\n",
               sizes_text(plan.sizes).c_str());
  redlock_result result;
  result.sizes = plan.sizes;
  servers s(plan.sizes);
  {
    // Pinned as the other uncontended phases: the client with the one
    // server and with every node, so that both sides of each ratio cross
    // (or do not cross) CPUs the same way.
    std::vector<std::unique_ptr<test::pinned>> pins;
    pins.push_back(std::make_unique<test::pinned>(plan.placement, s.single_server.pid()));
    for (auto& q : s.quorums)
      for (auto& n : q->nodes) pins.push_back(std::make_unique<test::pinned>(plan.placement, n->pid()));
    result.deployment = "Redlock over " + sizes_text(plan.sizes) + " redis-servers and one server, all on this "
                        "machine; the uncontended phase's placement " +
                        std::string(test::placement_name(plan.placement)) + " (" + pins.front()->describe() +
                        "; every node as the server)";
    combinations::for_each<RedlockBackend>([&](auto type) {
      using L = typename decltype(type)::type;
      if (!matches(plan.filter, L::combination_name())) return;
      std::fprintf(stderr, "redlock: %s, %d cycles on each\n", L::combination_name().c_str(), plan.cycles);
      try {
        result.rows.push_back(uncontended<L>(s, plan));
      } catch (const std::system_error& e) {
        throw std::runtime_error(L::combination_name() + " on Redlock: " + e.what());
      }
    });
  }
  // Contention, unpinned: the workers' threads spread over the CPUs.
  std::size_t i = 0;
  combinations::for_each<RedlockBackend>([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(plan.filter, L::combination_name())) return;
    auto& row = result.rows[i++];
    std::fprintf(stderr, "redlock: %s, %d workers for %lld ms, %d runs on each\n", row.name.c_str(),
                 plan.handoff_workers, static_cast<long long>(plan.contention.count()), plan.contended_pairs);
    try {
      contended<L>(s, plan, row);
    } catch (const std::system_error& e) {
      throw std::runtime_error(row.name + " contended on Redlock: " + e.what());
    }
  });
  for (int n : plan.sizes) {
    std::fprintf(stderr, "redlock fault: %d nodes, killed one at a time, %d run%s\n", n, plan.loss_runs,
                 plan.loss_runs == 1 ? "" : "s");
    result.losses.push_back(node_loss(n, plan.loss_runs));
    std::fprintf(stderr, "redlock fault: %d nodes, one stalled, %d votes\n", n, plan.stall_attempts);
    result.stalls.push_back(stalled_node(n, plan.stall_attempts));
  }
  std::fprintf(stderr, "redlock fault: the restart story, %d run%s of each act\n", plan.restart_runs,
               plan.restart_runs == 1 ? "" : "s");
  result.restart = restart_story(plan.restart_runs);
  return result;
}

}  // namespace dlock::compare
