#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "report_format.hpp"

namespace dlock::compare {

latency percentiles(std::vector<double>& s) {
  latency l;
  l.samples = s.size();
  if (s.empty()) return l;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) {
    auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(s.size()))) - 1;
    return s[std::min(i, s.size() - 1)];
  };
  l.p50_us = at(0.50);
  l.p99_us = at(0.99);
  return l;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

namespace {

using namespace format;

// The unit of a combination's uncontended ratios: the PINGs measured in
// blocks beside its cycles, or the run's PING when there are none.
double local_ping(const combination_result& r, double run_ping) {
  return r.ping.samples ? r.ping.p50_us : run_ping;
}

// A row's rate against the reference: the median of its alternating pairs,
// and the pairs (nothing when the reference did not run).
std::string vs_reference_json(const combination_result& r) {
  if (r.vs_reference_pairs.empty()) return {};
  std::string pairs;
  for (double v : r.vs_reference_pairs) pairs += (pairs.empty() ? "" : ", ") + number(v);
  return ",\n     \"vs_reference\": {\"rate_ratio\": " + number(median(r.vs_reference_pairs)) + ", \"pairs\": [" + pairs + "]}";
}

// The run the table shows: the one with 8 workers, else the largest.
const contention_result* shown(const combination_result& r) {
  const contention_result* best = nullptr;
  for (auto& c : r.contention)
    if (!best || c.workers == 8 || (best->workers != 8 && c.workers > best->workers)) best = &c;
  return best;
}

// One row of the table: the uncontended ratios, then the shown contention
// run (the safety columns count every run).
std::string row_line(const combination_result& r, std::size_t name_w, std::size_t rep_w, double ping) {
  std::string out = padded(r.name, name_w) + "  " + padded(r.reproduces, rep_w) + "  " +
                    fmt("%14.2f", r.uncontended.p50_us / local_ping(r, ping)) +
                    fmt("  %8.2f", r.uncontended.p99_us / local_ping(r, ping));
  if (auto* c = shown(r)) {
    std::size_t overlaps = 0;
    long long lost = 0;
    for (auto& each : r.contention) {
      overlaps += each.overlaps;
      lost += each.lost_updates;
    }
    out += " | " + fmt("%2.0f", c->workers) + fmt("  %8.0f", c->cycles_per_s) + fmt("  %11.0f", c->handoffs_per_s) +
           (c->handoff.samples ? fmt("  %17.2f", c->handoff.p50_us / ping) : std::string(19, ' ').replace(18, 1, "-")) +
           fmt("  %8.1f", c->commands_per_acquisition) + fmt("  %10.1f", c->server_cpu_us_per_acquisition) + "  " +
           padded(std::to_string(c->most) + "-" + std::to_string(c->fewest), 11) + " | " +
           fmt("%8.0f", static_cast<double>(overlaps)) + fmt("  %4.0f", static_cast<double>(lost));
  }
  return out + "\n";
}

// The smallest and largest of a set of ratios, as "1.9x" or "1.7-2.1x".
std::string span(const std::vector<double>& v) {
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const char* f = *hi >= 10 ? "%.0f" : "%.1f";
  std::string lo_s = fmt(f, *lo), hi_s = fmt(f, *hi);
  return lo_s + (hi_s != lo_s ? "-" + hi_s : std::string()) + "x";
}

// dlock's figures against the reference's, grouped: the uncontended cycle
// rate by ownership, the 8-worker rates by wait policy.
std::string against(const std::vector<combination_result>& rows, const reference_result& ref) {
  if (!ref.skipped.empty()) return "\nredis-py's Lock was not measured: " + ref.skipped + "\n";
  auto* rc = shown(ref.row);
  std::vector<std::pair<std::string, std::vector<double>>> rate, cycles, handoffs;
  auto add = [](auto& groups, const std::string& key, double v) {
    for (auto& [k, vs] : groups)
      if (k == key) return vs.push_back(v);
    groups.push_back({key, {v}});
  };
  for (auto& r : rows) {
    if (!r.vs_reference_pairs.empty()) add(rate, r.ownership, median(r.vs_reference_pairs));
    auto* c = shown(r);
    if (!c || !rc || c->workers != rc->workers) continue;
    if (rc->cycles_per_s > 0) add(cycles, r.wait, c->cycles_per_s / rc->cycles_per_s);
    if (rc->handoffs_per_s > 0) add(handoffs, r.wait, c->handoffs_per_s / rc->handoffs_per_s);
  }
  auto list = [](const auto& groups) {
    std::string out;
    for (auto& [k, vs] : groups) out += (out.empty() ? "" : ", ") + k + " " + span(vs);
    return out;
  };
  std::string out = "\nagainst redis-py's Lock (" + ref.version + ") in this run:\n  uncontended cycle rate, by ownership: " +
                    list(rate) + " (median of alternating pairs)\n";
  if (rc)
    out += "  at " + std::to_string(rc->workers) + " workers, by wait policy: cycles/s " + list(cycles) +
           "; hand-offs/s " + list(handoffs) + "\n";
  return out;
}

}  // namespace

std::string table(const environment& env, const std::vector<combination_result>& rows, const reference_result& ref,
                  const std::vector<fault_result>& faults) {
  const double ping = env.ping.p50_us;
  std::string out = env.optimized ? std::string()
                                   : "WARNING: this dlock-compare was built without optimization "
                                     "(-Dmeasured_optimization=false, a build that only tests it): its figures are "
                                     "not dlock's; ./dev run builds the measuring one\n\n";
  out += "PING round trip (p50): " + fmt("%.1f", ping) + " us on Redis " + env.redis_version + " (" +
                    env.redis_target + "), " + std::to_string(env.cpu_count) + " CPUs\nplacement of this PING and the " +
                    "uncontended cycles: " + env.placement + "; contention runs unpinned\n\n";
  std::size_t name_w = 11, rep_w = 10;
  for (auto& r : rows) {
    name_w = std::max(name_w, r.name.size());
    rep_w = std::max(rep_w, r.reproduces.size());
  }
  name_w = std::max(name_w, ref.row.name.size());
  rep_w = std::max(rep_w, ref.row.reproduces.size());
  out += padded("combination", name_w) + "  " + padded("reproduces", rep_w) +
         "  cycle p50/PING  p99/PING |  W  cycles/s  hand-offs/s  hand-off p50/PING  cmds/acq  srv us/acq  most-fewest | overlaps  lost\n";
  for (auto& r : rows) out += row_line(r, name_w, rep_w, ping);
  if (ref.skipped.empty()) out += row_line(ref.row, name_w, rep_w, ping);
  out += against(rows, ref);
  out += "\ncycle: one uncontended acquire + release, in PINGs measured in a block right after each block of\n"
         "cycles (redis-py's the same way); the other ratios are in the PING above, measured at the start.\n"
         "The cycle rate against redis-py: each row's blocks of cycles alternate with redis-py's, A B A B,\n"
         "and the median of the per-pair ratios is shown. W workers over two processes run the inventory's\n"
         "GET + SET under the lock; hand-offs/s: acquisitions by a worker other than the previous holder;\n"
         "hand-off: a release's reply to another worker's acquire reply; cmds/acq: commands the server ran\n"
         "per acquisition besides the GET and SET (a script's own commands count); srv us/acq: the server's\n"
         "CPU time (INFO cpu) per acquisition, its networking and the GET and SET included; overlaps and lost\n"
         "updates: over every W. redis-py/Lock: redis-py's Lock (30 s timeout, its default 0.1 s sleep\n"
         "between tries) through the same phases, from Python threads.\n";
  if (faults.empty()) return out;
  double lease = 0;
  for (auto& f : faults) lease = std::max(lease, f.lease_ms);
  out += "\n" + padded("faults, lease " + fmt("%.0f ms", lease), 26) + padded("killed holder: freed", 28) +
         " | " + padded("paused holder: overlap, release", 31) + " | " + padded("late DEL", 11) + " | skewed clock\n";
  for (auto& f : faults) {
    std::string killed = f.killed_freed_ms ? fmt("%.0f ms", *f.killed_freed_ms) : "never (" + fmt("%.0f ms", f.waited_ms) + ")";
    std::string paused = !f.paused_other_acquired ? "nobody else got in" : f.paused_overlap ? "OVERLAP" : "no overlap";
    std::string late = !f.late_release_deleted_other ? "n/a" : *f.late_release_deleted_other ? "YES" : "no";
    std::string skew = !f.skewed_clock_stole ? "n/a" : *f.skewed_clock_stole ? "YES (" + fmt("%.1f s ahead)", f.skew_s) : "no";
    out += padded(f.ownership + "/" + f.renewal, 26) + padded(killed, 28) + " | " + padded(paused, 19) + " " +
           padded(f.paused_release, 11) + " | " + padded(late, 11) + " | " + skew + "\n";
  }
  out += "\nkilled: SIGKILL, then how long until another client got the lock. paused: SIGSTOP past the lease,\n"
         "another client takes the lock, SIGCONT: did the two critical sections overlap, and what did the\n"
         "paused holder's release report. late DEL: a holder releases after its fixed lease ran out and\n"
         "another client took the lock: did it delete that client's key. skewed clock: a client whose wall\n"
         "clock runs ahead tries the lock while another holds it: did it get in (only locks that store a time).\n";
  return out;
}

std::string json(const environment& env, const std::vector<combination_result>& rows, const reference_result& ref,
                 const std::vector<fault_result>& faults, const backends_result& backends,
                 const std::string& renewals, const std::string& permits, const std::string& readers) {
  const double ping = env.ping.p50_us;
  auto row_json = [&](const combination_result& r) {
    std::string out = "{\"name\": " + quoted(r.name) + ", \"backend\": \"single\", \"ownership\": " + quoted(r.ownership) +
                      ", \"renewal\": " + quoted(r.renewal) + ", \"wait\": " + quoted(r.wait) +
                      ", \"reproduces\": " + quoted(r.reproduces) + ",\n     \"uncontended\": " +
                      latency_json(r.uncontended, local_ping(r, ping)) + ",\n     \"ping\": " + latency_json(r.ping, 0) +
                      vs_reference_json(r) + ",\n     \"contention\": [";
    for (std::size_t k = 0; k < r.contention.size(); ++k)
      out += (k ? ",\n       " : "\n       ") + contention_json(r.contention[k], ping);
    return out + "]";
  };
  std::string out = "{\n  \"environment\": {\n";
  out += "    \"redis_version\": " + quoted(env.redis_version) + ",\n";
  out += "    \"redis\": " + quoted(env.redis_target) + ",\n";
  out += "    \"ping\": " + latency_json(env.ping, 0) + ",\n";
  out += "    \"placement\": " + quoted(env.placement) + ",\n";
  out += "    \"cpu_count\": " + std::to_string(env.cpu_count) + ",\n";
  out += "    \"compiler\": " + quoted(env.compiler) + ",\n";
  out += std::string("    \"optimized\": ") + (env.optimized ? "true" : "false") + ",\n";
  out += "    \"dlock_version\": " + quoted(env.dlock_version) + ",\n";
  out += "    \"git_commit\": " + quoted(env.git_commit) + ",\n";
  out += "    \"depth\": " + quoted(env.depth) + "\n  },\n  \"combinations\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) out += (i ? ",\n    " : "\n    ") + row_json(rows[i]) + "}";
  // The reference: its figures, or why there are none.
  out += "\n  ],\n  \"reference\": ";
  if (ref.skipped.empty())
    out += row_json(ref.row) + ",\n     \"library\": \"redis-py\", \"version\": " + quoted(ref.version) + "}";
  else
    out += "{\"library\": \"redis-py\", \"skipped\": " + quoted(ref.skipped) + "}";
  out += ",\n  \"faults\": [";
  for (std::size_t i = 0; i < faults.size(); ++i) {
    auto& f = faults[i];
    out += i ? ",\n" : "\n";
    out += "    {\"combination\": " + quoted(f.combination) + ", \"ownership\": " + quoted(f.ownership) +
           ", \"renewal\": " + quoted(f.renewal) + ", \"lease_ms\": " + number(f.lease_ms) +
           ", \"period_ms\": " + number(f.period_ms) + ", \"waited_ms\": " + number(f.waited_ms) +
           ",\n     \"killed_freed_ms\": " + (f.killed_freed_ms ? number(*f.killed_freed_ms) : "null") +
           ", \"paused_other_acquired\": " + (f.paused_other_acquired ? "true" : "false") +
           ", \"paused_overlap\": " + (f.paused_overlap ? "true" : "false") +
           ", \"paused_release\": " + quoted(f.paused_release) + ", \"late_release_deleted_other\": " +
           (f.late_release_deleted_other ? (*f.late_release_deleted_other ? "true" : "false") : "null") +
           ", \"skewed_clock_stole\": " + (f.skewed_clock_stole ? (*f.skewed_clock_stole ? "true" : "false") : "null") +
           ", \"skew_s\": " + number(f.skew_s) + ", \"fenced_late_write_refused\": " +
           (f.fenced_late_write_refused ? (*f.fenced_late_write_refused ? "true" : "false") : "null") +
           ",\n     \"timelines\": " + timelines_json(f.timelines) + "}";
  }
  out += "\n  ],\n  \"renewals\": " + renewals;
  out += ",\n  \"permits\": " + permits;
  out += ",\n  \"readers\": " + readers;
  out += ",\n  \"backends\": {\"names\": [";
  for (std::size_t i = 0; i < backends.names.size(); ++i) out += (i ? ", " : "") + quoted(backends.names[i]);
  out += "], \"deployment\": " + quoted(backends.deployment) + ",\n    \"rows\": [";
  for (std::size_t i = 0; i < backends.rows.size(); ++i) {
    auto& r = backends.rows[i];
    out += (i ? ",\n      " : "\n      ");
    out += "{\"name\": " + quoted(r.name) + ", \"single\": " + latency_json(r.single, 0) +
           ", \"sentinel\": " + latency_json(r.sentinel, 0) +
           ", \"sentinel_vs_single\": " + number(median(r.sentinel_pairs)) + ", \"sentinel_acknowledged\": " +
           (r.acknowledged ? latency_json(*r.acknowledged, 0) : "null") + ", \"acknowledged_vs_single\": " +
           (r.acknowledged ? number(median(r.acknowledged_pairs)) : "null") + "}";
  }
  out += "],\n    \"failover\": ";
  if (backends.failover) {
    auto& f = *backends.failover;
    out += "{\"runs\": " + std::to_string(f.runs) + ", \"reproduced_overlaps\": " +
           std::to_string(f.reproduced_overlaps) + ", \"prevented_overlaps\": " + std::to_string(f.prevented_overlaps) +
           ", \"prevented_refused\": " + std::to_string(f.prevented_refused) + ", \"prevented_b_alone\": " +
           std::to_string(f.prevented_b_alone) + ", \"fenced_overlaps\": " + std::to_string(f.fenced_overlaps) +
           ", \"fenced_late_refused\": " + std::to_string(f.fenced_late_refused) + ", \"kill_to_lock_min_ms\": " +
           number(f.kill_to_lock_min_ms) + ", \"kill_to_lock_max_ms\": " + number(f.kill_to_lock_max_ms) +
           ",\n     \"timelines\": " + timelines_json(f.timelines) + "}";
  } else {
    out += "null";
  }
  out += ",\n    \"cluster\": " + (backends.cluster ? cluster_json(*backends.cluster) : std::string("null"));
  out += ",\n    \"tls\": " + (backends.tls ? tls_json(*backends.tls) : std::string("null"));
  out += ",\n    \"redlock\": " + (backends.redlock ? redlock_json(*backends.redlock) : std::string("null"));
  out += "}\n}\n";
  return out;
}

}  // namespace dlock::compare
