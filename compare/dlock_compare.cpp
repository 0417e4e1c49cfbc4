// dlock-compare: every lock combination of the compile-time list, measured
// on one Redis (a private redis-server unless --redis is given), as a table
// on stdout and every figure in DIR/compare.json.
#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include <dlock/combinations.hpp>
#include <dlock/detail/random.hpp>
#include <lock/backend_instances.hpp>  // every combination on each backend, compiled once
#include <support/child_process.hpp>
#include <support/placement.hpp>
#include <support/redis_server.hpp>

#include "backends.hpp"
#include "cluster.hpp"
#include "permits.hpp"
#include "readers.hpp"
#include "redlock_phase.hpp"
#include "contention.hpp"
#include "faults.hpp"
#include "measure.hpp"
#include "options.hpp"
#include "reference.hpp"
#include "report.hpp"
#include "run_plan.hpp"
#include "renewals.hpp"
#include "tls_phase.hpp"

namespace {

using namespace dlock::compare;

// The names of the combinations that pass the filter, in list order.
std::vector<std::string> selected(const options& o) {
  std::vector<std::string> names;
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (matches(o.filter, L::combination_name())) names.push_back(L::combination_name());
  });
  return names;
}

// --backend tls: see tls_phase.hpp.
tls_result run_tls(const options& o, const counts& n) {
  std::fprintf(stderr, "tls: making certificates, starting a redis-server with a plain and a TLS port...\n");
  tls_servers s;
  dlock::test::pinned pin(o.placement, s.server.pid());
  tls_result t;
  t.deployment = s.describe() + "; placement " + dlock::test::placement_name(o.placement) + " (" + pin.describe() + ")";
  std::fprintf(stderr, "tls: PING, %d on each\n", n.ping);
  t.rows.push_back(tls_ping(s, n.ping, n.pairs));
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(o.filter, L::combination_name())) return;
    std::fprintf(stderr, "tls: %s, %d cycles on each\n", L::combination_name().c_str(), n.cycles);
    try {
      t.rows.push_back(tls_cycles<L>(s, "tls:" + L::combination_name(), n.cycles, n.pairs));
    } catch (const std::system_error& e) {
      throw std::runtime_error(L::combination_name() + " over TLS: " + e.what());
    }
  });
  return t;
}

// The backends phases. --backend cluster: see cluster.hpp; redlock3 and
// redlock5: see redlock_phase.hpp. --backend
// sentinel: its own private server for the one-server column (so that both
// sides run on this machine, the same way), a Sentinel deployment, every
// selected combination's cycle on both, then seed 003's story.
backends_result run_backends(const options& o, const counts& n) {
  backends_result b;
  b.names = o.backends;
  if (has(o.backends, "cluster")) {
    cluster_plan plan;
    plan.filter = o.filter;
    plan.placement = o.placement;
    plan.cycles = n.cycles;
    plan.pairs = n.pairs;
    plan.contended_pairs = o.how == depth::quick ? 1 : o.how == depth::thorough ? 4 : 2;
    plan.contention = n.contention;
    plan.pubsub_workers.clear();
    for (int w : n.workers)
      if (w >= 8) plan.pubsub_workers.push_back(w);
    b.cluster = run_cluster(plan);
  }
  if (has(o.backends, "tls")) b.tls = run_tls(o, n);
  if (has(o.backends, "redlock3") || has(o.backends, "redlock5")) {
    redlock_plan plan;
    plan.filter = o.filter;
    for (int size : {3, 5})
      if (has(o.backends, "redlock" + std::to_string(size))) plan.sizes.push_back(size);
    plan.placement = o.placement;
    plan.cycles = n.cycles;
    plan.pairs = n.pairs;
    plan.contended_pairs = o.how == depth::quick ? 1 : o.how == depth::thorough ? 4 : 2;
    plan.contention = n.contention;
    plan.loss_runs = n.node_loss_runs;
    plan.stall_attempts = n.stall_attempts;
    plan.restart_runs = n.restart_runs;
    b.redlock = run_redlock(plan);
  }
  if (!has(o.backends, "sentinel")) return b;
  std::fprintf(stderr, "backends: starting a private redis-server and a Sentinel deployment...\n");
  dlock::test::redis_server single_server;
  dlock::RedisBackend single(single_server.url());
  sentinel_servers s;
  // Pinned as the main table's uncontended phase is (--placement): the
  // client with the one server, and with the Sentinel master, so that both
  // sides of each ratio cross (or do not cross) CPUs the same way. The
  // replicas and the sentinel run where the scheduler puts them.
  dlock::test::pinned pin_single(o.placement, single_server.pid());
  dlock::test::pinned pin_master(o.placement, s.deployment.node(0).pid());
  b.deployment = std::string(s.describe()) + "; placement " + dlock::test::placement_name(o.placement) + " (" +
                 pin_single.describe() + "; the master: " + pin_master.describe() + ")";
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(o.filter, L::combination_name())) return;
    std::fprintf(stderr, "backends: %s, %d cycles on each\n", L::combination_name().c_str(), n.cycles);
    try {
      b.rows.push_back(backend_cycles<L>(single, s, "backends:" + L::combination_name(), n.cycles, n.pairs));
    } catch (const std::system_error& e) {
      throw std::runtime_error(L::combination_name() + " on Sentinel: " + e.what());
    }
  });
  std::fprintf(stderr, "fault: seed 003's failover story, %d run%s of each act (three deployments at a time)\n",
               n.failover_runs, n.failover_runs == 1 ? "" : "s");
  b.failover = failover_fault(n.failover_runs);
  return b;
}

// One contention run of L with `workers` workers, half in each of two
// processes (this program, run with --worker).
template <class L>
contention_result contend_combination(dlock::RedisBackend& redis, const std::string& self, const std::string& url,
                                      const std::string& key, int workers, const counts& n, double ping_us) {
  const std::string name = L::combination_name(), counter = key + ":counter";
  auto launch = [&](int p, int threads, std::int64_t start, std::int64_t duration) {
    return std::make_unique<dlock::test::child_process>(
        self, std::vector<std::string>{"--worker", name, url, key, counter, "p" + std::to_string(p),
                                       std::to_string(threads), std::to_string(start), std::to_string(duration)});
  };
  return dlock::compare::contend(redis, name, key, counter, workers, {n.contention, n.start_delay}, launch, ping_us);
}

// Calls f(type_c<L>) for the combination named `name`; false if none is.
template <class F>
bool with_combination(const std::string& name, F&& f) {
  bool found = false;
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (found || L::combination_name() != name) return;
    found = true;
    f(type);
  });
  if (!found) std::fprintf(stderr, "dlock-compare: no combination '%s'\n", name.c_str());
  return found;
}

// The --hold side of the fault stories (see faults.hpp).
int hold_mode(const std::vector<std::string_view>& args) {
  if (args.size() != 6 || (args[5] != "fenced" && args[5] != "plain")) {
    std::fprintf(stderr, "dlock-compare --hold: expected 6 arguments, the last plain or fenced\n");
    return 2;
  }
  int rc = 2;
  with_combination(std::string(args[0]), [&](auto type) {
    using L = typename decltype(type)::type;
    rc = hold_main<L>(std::string(args[1]), std::string(args[2]), std::stoll(std::string(args[3])),
                      std::stoll(std::string(args[4])), args[5] == "fenced");
  });
  return rc;
}

// The --worker side: finds the combination by name and runs its share.
int worker_main(const std::vector<std::string_view>& args) {
  if (args.size() != 8) {
    std::fprintf(stderr, "dlock-compare --worker: expected 8 arguments\n");
    return 2;
  }
  worker_args a{std::string(args[0]), std::string(args[1]), std::string(args[2]), std::string(args[3]),
                std::string(args[4]), std::stoi(std::string(args[5])), std::stoll(std::string(args[6])),
                std::stoll(std::string(args[7]))};
  bool found = with_combination(a.combination, [&](auto type) {
    using L = typename decltype(type)::type;
    for (auto& line : run_workers<L>(a)) std::printf("%s\n", line.c_str());
  });
  return found ? 0 : 2;
}

// The uncontended phase, pinned (redis-py's process, started here, inherits
// it): the run's PING, the unit of the contention figures, then every
// selected combination's cycle alternating with redis-py's. Fills `rows`
// (one per combination) and the reference's cycle.
void uncontended_phase(const options& o, const counts& n, dlock::RedisBackend& redis, int server_pid,
                       const std::string& prefix, const std::string& self, reference_plan& plan, environment& env,
                       std::vector<combination_result>& rows, reference_result& ref, progress& bar) {
  dlock::test::pinned pin(o.placement, server_pid);
  env.placement = std::string(dlock::test::placement_name(o.placement)) + " (" + pin.describe() + ")";
  std::fprintf(stderr, "uncontended phase: placement %s\n", env.placement.c_str());
  std::fprintf(stderr, "measuring the PING round trip (%d samples)\n", n.ping);
  env.ping = ping(redis, n.ping);
  plan.ping_us = env.ping.p50_us;
  // First the reference: a reader sees at once whether it runs.
  std::unique_ptr<dlock::test::redis_py_lock> py;
  ref = start_redis_py(self, plan, py);
  if (!ref.skipped.empty()) std::fprintf(stderr, "redis-py's Lock is not measured: %s\n", ref.skipped.c_str());
  reference_cycles ref_cycles{py.get(), {}, {}};
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(o.filter, L::combination_name())) return;
    bar.step(L::combination_name() + ": uncontended cycle, " + std::to_string(n.cycles) + " samples" +
             (py ? ", alternating with redis-py's" : ""));
    combination_result r;
    r.name = L::combination_name();
    r.ownership = L::ownership_type::policy_name;
    r.renewal = L::renewal_type::policy_name;
    r.wait = L::wait_type::policy_name;
    r.reproduces = reproduces(r.ownership, r.renewal);
    try {
      uncontended<L>(redis, prefix + "uncontended:" + r.name, n.cycles, n.pairs, r, ref_cycles);
    } catch (const std::system_error& e) {
      throw std::runtime_error(r.name + ": " + e.what());
    }
    rows.push_back(std::move(r));
  });
  if (ref.skipped.empty()) {
    ref.row.uncontended = percentiles(ref_cycles.samples);
    ref.row.ping = percentiles(ref_cycles.pings);
  }
}

// Contention, unpinned (the workers' processes spread over the CPUs): each
// row's runs with every worker count.
void contention_phase(const options& o, const counts& n, dlock::RedisBackend& redis, const std::string& url,
                      const std::string& prefix, const std::string& self, double ping_us,
                      std::vector<combination_result>& rows, progress& bar) {
  std::size_t row = 0;
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(o.filter, L::combination_name())) return;
    auto& r = rows[row++];
    try {
      for (int w : n.workers) {
        bar.step(r.name + ": " + std::to_string(w) + " workers in 2 processes for " +
                 std::to_string(n.contention.count()) + " ms");
        r.contention.push_back(contend_combination<L>(
            redis, self, url, prefix + "contended:" + r.name + ":" + std::to_string(w), w, n, ping_us));
      }
    } catch (const std::system_error& e) {
      throw std::runtime_error(r.name + ": " + e.what());
    }
  });
}

// The fault stories: once per ownership and renewal pair, with the first
// combination of the pair whose wait retries.
std::vector<fault_result> fault_phase(const options& o, const counts& n, dlock::RedisBackend& redis,
                                      const std::string& url, const std::string& prefix, const std::string& self) {
  std::vector<fault_result> faults;
  std::set<std::string> pairs;
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(o.filter, L::combination_name())) return;
    if constexpr (!std::is_same_v<typename L::wait_type, dlock::wait::TryOnce>) {
      auto pair = std::string(L::ownership_type::policy_name) + "/" + L::renewal_type::policy_name;
      if (!pairs.insert(pair).second) return;
      std::fprintf(stderr, "fault stories: %s (as %s)\n", pair.c_str(), L::combination_name().c_str());
      faults.push_back(fault_stories<L>(redis, self, url, prefix + "faults:" + pair, n.fault_lease));
    }
  });
  return faults;
}

// Where report.html goes: --report's folder, else beside compare.json.
std::string report_dir(const options& o) { return o.report_dir.empty() ? o.out_dir : o.report_dir; }

int run(const options& o) {
  const auto n = counts_for(o);
  if (!has(o.backends, "single")) {
    // Only the backends phase.
    auto backends = run_backends(o, n);
    std::printf("%s", backends_table(backends).c_str());
    write_json(o.out_dir, json(base_environment(o), {}, reference_result{"", "only other backends than single ran", {}},
                               {}, backends));
    write_report(std::filesystem::read_symlink("/proc/self/exe"), o.out_dir, report_dir(o));
    return 0;
  }
  std::optional<dlock::test::redis_server> private_server;
  std::string url = o.redis_url, target = "private";
  if (url.empty()) {
    std::fprintf(stderr, "starting a private redis-server...\n");
    private_server.emplace();
    url = private_server->url();
  } else {
    std::error_code ec;
    std::string why;
    auto cfg = dlock::redis::parse_url(url, ec, &why);
    if (ec) throw std::runtime_error("--redis: " + why);
    target = cfg.describe();
  }
  dlock::RedisBackend redis(url);
  // Every key of the run lives under one prefix, deleted at the end.
  const std::string prefix = "dlock-compare:" + dlock::detail::random_hex(6) + ":";
  environment env = base_environment(o);
  env.redis_version = info_field(redis, "server", "redis_version");
  env.redis_target = target;

  // This program, run again as --worker and --hold child processes.
  const auto self = std::filesystem::read_symlink("/proc/self/exe").string();
  // Python takes longer to start than this program (its interpreter, then
  // redis-py): its workers get a longer head start.
  const auto python_start = std::max(n.start_delay, std::chrono::milliseconds(2000));
  reference_plan plan{url, prefix, n.workers, {n.contention, python_start}, 0};
  progress bar(selected(o).size() * (1 + n.workers.size()) + reference_steps(plan));
  std::vector<combination_result> rows;
  reference_result ref;
  uncontended_phase(o, n, redis, private_server ? private_server->pid() : -1, prefix, self, plan, env, rows, ref, bar);
  if (ref.skipped.empty()) contend_redis_py(redis, self, plan, ref, [&](const std::string& what) { bar.step(what); });
  contention_phase(o, n, redis, url, prefix, self, env.ping.p50_us, rows, bar);
  auto faults = fault_phase(o, n, redis, url, prefix, self);
  // What keeping locks costs the server: the default lock, held many times.
  std::optional<renewals_result> renewals;
  if (matches(o.filter, dlock::Lock<>::combination_name())) {
    std::fprintf(stderr, "renewals: held locks, batched and one call each\n");
    renewals = run_renewals(redis, url, prefix, n.held_locks, n.renewal_pairs);
  }
  // What a semaphore's permits buy: one permit against four, 8 workers.
  std::optional<permits_result> permits;
  if (matches(o.filter, "semaphore/watchdog/spin")) {
    std::fprintf(stderr, "permits: 8 workers on a semaphore of 1 permit and of 4\n");
    permits = run_permits(redis, url, prefix, 8, 4, n.contention, o.how == depth::quick ? 1 : 2);
  }
  // What a read-write lock's sharing buys, and a writer behind readers.
  std::optional<readers_result> readers;
  if (matches(o.filter, "rw/watchdog/spin")) {
    std::fprintf(stderr, "readers: 4 workers sharing a read-write lock and 4 on a token lock; a writer behind readers\n");
    readers = run_readers(redis, url, prefix, 4, n.contention, o.how == depth::quick ? 1 : 2);
  }
  auto deleted = delete_keys(redis, prefix);
  if (!private_server) std::fprintf(stderr, "deleted the run's %zu keys (%s*)\n", deleted, prefix.c_str());
  auto backends = run_backends(o, n);

  std::printf("%s", table(env, rows, ref, faults).c_str());
  if (renewals) std::printf("%s", renewals_table(*renewals).c_str());
  if (permits) std::printf("%s", permits_table(*permits).c_str());
  if (readers) std::printf("%s", readers_table(*readers).c_str());
  std::printf("%s", backends_table(backends).c_str());
  write_json(o.out_dir, json(env, rows, ref, faults, backends, renewals ? renewals_json(*renewals) : "null",
                             permits ? permits_json(*permits) : "null", readers ? readers_json(*readers) : "null"));
  write_report(self, o.out_dir, report_dir(o));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--worker") return worker_main({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "--hold") try {
      return hold_mode({args.begin() + 1, args.end()});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dlock-compare --hold: %s\n", e.what());
      return 1;
    }
  std::string why;
  auto o = parse_options(args, why);
  if (!o) {
    std::fprintf(stderr, "dlock-compare: %s (--help for usage)\n", why.c_str());
    return 2;
  }
  if (o->help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  if (o->list) {
    dlock::combinations::for_each([&](auto type) {
      using L = typename decltype(type)::type;
      if (matches(o->filter, L::combination_name()))
        std::printf("%s\t%s\n", L::combination_name().c_str(),
                    reproduces(L::ownership_type::policy_name, L::renewal_type::policy_name).c_str());
    });
    return 0;
  }
  if (selected(*o).empty()) {
    std::fprintf(stderr, "dlock-compare: no combination matches '%s' (--list shows them)\n", o->filter.c_str());
    return 2;
  }
  try {
    return run(*o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlock-compare: %s\n", e.what());
    return 1;
  }
}
