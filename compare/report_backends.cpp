// dlock-compare's reports of the other backends: Sentinel (with seed 003's
// failover story), TLS and Redis Cluster, as tables and as JSON (Redlock's
// are in report_redlock.cpp).
#include <algorithm>
#include <string>
#include <vector>

#include "report.hpp"
#include "report_format.hpp"

namespace dlock::compare {

using namespace format;

std::string backends_table(const backends_result& b) {
  std::string out = b.cluster ? cluster_table(*b.cluster) : std::string();
  if (b.tls) out += tls_table(*b.tls);
  if (b.redlock) out += redlock_table(*b.redlock);
  if (b.rows.empty() && !b.failover) return out;
  out += "\nbackends: one server, and Sentinel (" + b.deployment + ")\n";
  std::size_t name_w = 11;
  for (auto& r : b.rows) name_w = std::max(name_w, r.name.size());
  if (!b.rows.empty()) {
    out += padded("combination", name_w) +
           "  single p50   sentinel p50  x single   sentinel+WAIT p50  x single\n";
    for (auto& r : b.rows) {
      out += padded(r.name, name_w) + "  " + padded(fmt("%.1f us", r.single.p50_us), 11) + "  " +
             padded(fmt("%.1f us", r.sentinel.p50_us), 13) + padded(fmt("%.2f", median(r.sentinel_pairs)), 11) +
             "  ";
      if (r.acknowledged)
        out += padded(fmt("%.1f us", r.acknowledged->p50_us), 18) + " " + fmt("%.2f", median(r.acknowledged_pairs));
      else
        out += "n/a (not owner-checked)";
      out += "\n";
    }
    out += "\nthe uncontended cycle (acquire + release, blocking) on each backend, in blocks that alternate\n"
           "one server, Sentinel, Sentinel with replica acknowledgement (WAIT for every replica), the client\n"
           "pinned with each server as the deployment line says (the replicas and the sentinel unpinned);\n"
           "x single: the median over the pairs of that block's p50 over the one-server block's next to it.\n";
  }
  if (b.failover) {
    auto& f = *b.failover;
    auto of = [&](int n) { return std::to_string(n) + "/" + std::to_string(f.runs); };
    out += "\nfault: seed 003's failover (master killed with replication held back), " + std::to_string(f.runs) +
           " run" + (f.runs == 1 ? "" : "s") + " of each act:\n";
    out += "  reproduced (no acknowledgement): two holders in " + of(f.reproduced_overlaps) + "\n";
    out += "  prevented (WAIT):                two holders in " + of(f.prevented_overlaps) + ", A refused in " +
           of(f.prevented_refused) + ", B alone in " + of(f.prevented_b_alone) + "\n";
    out += "  fenced (fencing tokens):         two holders in " + of(f.fenced_overlaps) + ", late write refused in " +
           of(f.fenced_late_refused) + "\n";
    out += "  from the kill to B's lock: " + fmt("%.0f", f.kill_to_lock_min_ms) + " to " +
           fmt("%.0f ms", f.kill_to_lock_max_ms) + "\n";
  }
  return out;
}

std::string tls_table(const tls_result& t) {
  std::string out = "\nTLS: " + t.deployment + "\n";
  std::size_t name_w = 11;
  for (auto& r : t.rows) name_w = std::max(name_w, r.name.size());
  out += padded("", name_w) + "  plain p50   TLS p50    x plain  (pairs: min-max)\n";
  for (auto& r : t.rows) {
    auto [lo, hi] = std::minmax_element(r.pairs.begin(), r.pairs.end());
    out += padded(r.name, name_w) + "  " + padded(fmt("%.1f us", r.plain.p50_us), 11) +
           padded(fmt("%.1f us", r.tls.p50_us), 11) + padded(fmt("%.2f", median(r.pairs)), 9) +
           (r.pairs.empty() ? "" : fmt("(%.2f", *lo) + fmt("-%.2f)", *hi)) + "\n";
  }
  out += "\nPING through the blocking path, and each combination's uncontended cycle (acquire + release,\n"
         "blocking), in blocks that alternate the plain-text port and the TLS port of the same server\n"
         "(pinned with the client as the main table's placement says); x plain: the median over the pairs\n"
         "of the TLS block's p50 over the plain block's next to it.\n";
  return out;
}

std::string tls_json(const tls_result& t) {
  std::string out = "{\"deployment\": " + quoted(t.deployment) + ", \"rows\": [";
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    auto& r = t.rows[i];
    out += (i ? ",\n      " : "\n      ");
    out += "{\"name\": " + quoted(r.name) + ", \"plain\": " + latency_json(r.plain, 0) + ", \"tls\": " +
           latency_json(r.tls, 0) + ", \"tls_vs_plain\": " + number(median(r.pairs)) + "}";
  }
  return out + "]}";
}

std::string cluster_table(const cluster_result& c) {
  std::string out = "\ncluster: " + c.deployment + "\n";
  std::size_t name_w = 11;
  for (auto& r : c.rows) name_w = std::max(name_w, r.name.size());
  if (!c.rows.empty()) {
    out += padded("combination", name_w) +
           "  single p50   cluster p50  x single  no replicas  x single   W  handoffs/s single  cluster  x single" +
           "   handoff p50 x single  overlaps\n";
    for (auto& r : c.rows) {
      out += padded(r.name, name_w) + "  " + padded(fmt("%.1f us", r.single.p50_us), 11) + "  " +
             padded(fmt("%.1f us", r.cluster.p50_us), 12) + padded(fmt("%.2f", median(r.cycle_pairs)), 10) +
             padded(fmt("%.1f us", r.bare_cluster.p50_us), 13) + padded(fmt("%.2f", median(r.bare_cycle_pairs)), 11) +
             padded(std::to_string(r.workers), 3) + padded(fmt("%.0f", r.single_contended.handoffs_per_s), 18) +
             padded(fmt("%.0f", r.cluster_contended.handoffs_per_s), 9) +
             padded(fmt("%.2f", median(r.handoff_rate_pairs)), 11) +
             padded(fmt("%.2f", median(r.handoff_latency_pairs)), 22) + std::to_string(r.cluster_overlaps) +
             (r.cluster_errors ? " (" + std::to_string(r.cluster_errors) + " errors)" : "") + "\n";
    }
    out += "\nthe uncontended cycle (acquire + release, blocking) in blocks that alternate one server, the\n"
           "cluster, and the cluster without replicas (the client pinned with each as the placement says);\n"
           "then W workers on one lock, each with its own backend, in one process, in runs that alternate one\n"
           "server and the cluster (with replicas). x single: the median over the pairs of the cluster's\n"
           "figure over one server's next to it (a hand-off rate above 1 is faster on the cluster; a p50\n"
           "above 1, slower). overlaps: holds that overlapped on the cluster.\n";
  }
  if (c.many) {
    auto& m = *c.many;
    out += "\nmany locks: " + std::to_string(m.workers) + " threads over " + std::to_string(m.backends) +
           " backends, each thread on a lock of its own (" + m.combination + "), uncontended lock/unlock:\n";
    out += "  one master:    " + fmt("%.0f cycles/s", median(m.one_master_per_s)) + ", the busiest master's CPU " +
           fmt("%.0f%%", 100 * median(m.one_master_busiest_cpu)) + "\n";
    out += "  three masters: " + fmt("%.0f cycles/s", median(m.three_masters_per_s)) + ", the busiest master's CPU " +
           fmt("%.0f%%", 100 * median(m.three_masters_busiest_cpu)) + "\n";
    out += "  three over one: " + fmt("%.2f", median(m.pairs)) + " (median of " + std::to_string(m.pairs.size()) +
           " alternating pairs" + (m.errors ? ", " + std::to_string(m.errors) + " errors" : "") + ")\n";
  }
  if (!c.pubsub.empty()) {
    out += "\npub/sub waiting on the cluster, W workers on one lock:\n"
           "  combination                 mode      W   acquisitions/s  commands/acq  bus messages/acq\n";
    for (auto& p : c.pubsub)
      out += "  " + padded(p.combination, 28) + padded(p.mode, 10) + padded(std::to_string(p.workers), 4) +
             padded(fmt("%.0f", p.cycles_per_s), 16) + padded(fmt("%.2f", p.commands_per_acquisition), 14) +
             fmt("%.2f", p.bus_messages_per_acquisition) +
             (p.errors ? " (" + std::to_string(p.errors) + " errors)" : "") + "\n";
    out += "  commands/acq: what the masters ran per acquisition besides the critical section's GET and SET\n"
           "  (INFO commandstats); bus messages/acq: pub/sub messages sent over the cluster bus per\n"
           "  acquisition, summed over every node (CLUSTER INFO).\n";
  }
  return out;
}

std::string cluster_json(const cluster_result& c) {
  std::string out = "{\"deployment\": " + quoted(c.deployment) + ",\n    \"rows\": [";
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    auto& r = c.rows[i];
    out += (i ? ",\n      " : "\n      ");
    out += "{\"name\": " + quoted(r.name) + ", \"single\": " + latency_json(r.single, 0) +
           ", \"cluster\": " + latency_json(r.cluster, 0) + ", \"cycle_vs_single\": " + number(median(r.cycle_pairs)) +
           ", \"cycle_pairs\": " + number_list(r.cycle_pairs) + ", \"cluster_without_replicas\": " +
           latency_json(r.bare_cluster, 0) + ", \"without_replicas_vs_single\": " +
           number(median(r.bare_cycle_pairs)) + ", \"without_replicas_pairs\": " + number_list(r.bare_cycle_pairs) +
           ",\n       \"workers\": " + std::to_string(r.workers) +
           ", \"single_contended\": " + contention_json(r.single_contended, 0) +
           ",\n       \"cluster_contended\": " + contention_json(r.cluster_contended, 0) +
           ",\n       \"handoff_rate_vs_single\": " + number(median(r.handoff_rate_pairs)) +
           ", \"handoff_rate_pairs\": " + number_list(r.handoff_rate_pairs) +
           ", \"handoff_p50_vs_single\": " + number(median(r.handoff_latency_pairs)) +
           ", \"handoff_p50_pairs\": " + number_list(r.handoff_latency_pairs) +
           ", \"cluster_overlaps\": " + std::to_string(r.cluster_overlaps) +
           ", \"cluster_errors\": " + std::to_string(r.cluster_errors) + "}";
  }
  out += "],\n    \"many_locks\": ";
  if (c.many) {
    auto& m = *c.many;
    out += "{\"combination\": " + quoted(m.combination) + ", \"workers\": " + std::to_string(m.workers) +
           ", \"backends\": " + std::to_string(m.backends) + ", \"one_master_per_s\": " + number_list(m.one_master_per_s) +
           ", \"three_masters_per_s\": " + number_list(m.three_masters_per_s) + ", \"three_over_one\": " +
           number(median(m.pairs)) + ", \"pairs\": " + number_list(m.pairs) +
           ", \"one_master_busiest_cpu\": " + number_list(m.one_master_busiest_cpu) +
           ", \"three_masters_busiest_cpu\": " + number_list(m.three_masters_busiest_cpu) +
           ", \"errors\": " + std::to_string(m.errors) + "}";
  } else {
    out += "null";
  }
  out += ",\n    \"pubsub\": [";
  for (std::size_t i = 0; i < c.pubsub.size(); ++i) {
    auto& p = c.pubsub[i];
    out += (i ? ",\n      " : "\n      ");
    out += "{\"combination\": " + quoted(p.combination) + ", \"mode\": " + quoted(p.mode) +
           ", \"workers\": " + std::to_string(p.workers) + ", \"cycles\": " + std::to_string(p.cycles) +
           ", \"cycles_per_s\": " + number(p.cycles_per_s) + ", \"commands_per_acquisition\": " +
           number(p.commands_per_acquisition) + ", \"bus_messages_per_acquisition\": " +
           number(p.bus_messages_per_acquisition) + ", \"errors\": " + std::to_string(p.errors) + "}";
  }
  return out + "]}";
}

}  // namespace dlock::compare
