// dlock-compare's report of the Redlock phase (--backend redlock3,
// redlock5): the tables and the JSON object.
#include <algorithm>
#include <string>
#include <vector>

#include "report.hpp"
#include "report_format.hpp"

namespace dlock::compare {

using namespace format;

namespace {

// "min / median / max ms" of `v`, or "none" when empty.
std::string spread_ms(std::vector<double> v) {
  if (v.empty()) return "none";
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt("%.1f", *lo) + fmt(" / %.1f", median(v)) + fmt(" / %.1f ms", *hi);
}

std::string of(int k, int n) { return std::to_string(k) + "/" + std::to_string(n); }

std::string ordinal(std::size_t k) {
  static const char* names[] = {"1st", "2nd", "3rd"};
  return k < 3 ? names[k] : std::to_string(k + 1) + "th";
}

}  // namespace

std::string redlock_table(const redlock_result& r) {
  std::string out = "\nredlock: " + r.deployment + "\n";
  std::size_t name_w = 11;
  for (auto& row : r.rows) name_w = std::max(name_w, row.name.size());
  if (!r.rows.empty()) {
    out += padded("combination", name_w) + "  single p50";
    for (int n : r.sizes) out += "  " + padded(std::to_string(n) + " nodes p50", 13) + "x single";
    out += "\n";
    for (auto& row : r.rows) {
      out += padded(row.name, name_w) + "  " + padded(fmt("%.1f us", row.single.p50_us), 11);
      for (auto& q : row.quorums)
        out += "  " + padded(fmt("%.1f us", q.cycle.p50_us), 13) + padded(fmt("%.2f", median(q.cycle_pairs)), 8);
      out += "\n";
    }
    out += "\nthe uncontended cycle (acquire + release, blocking) in blocks that alternate one server and each\n"
           "deployment; x single: the median over the pairs of that block's p50 over the one-server block's\n"
           "next to it. Every node shares this machine's CPUs with the client (on separate machines the\n"
           "nodes would answer in parallel): a ratio here is the work, an upper bound of the latency.\n";
    out += "\n" + padded("combination", name_w) + "   W  single: handoffs/s cmds/acq";
    for (int n : r.sizes)
      out += " | " + std::to_string(n) + " nodes: handoffs/s x single  p50 x single  cmds/acq overlaps";
    out += "\n";
    for (auto& row : r.rows) {
      out += padded(row.name, name_w) + padded("  " + std::to_string(row.workers), 6) +
             padded(fmt("%.0f", row.single_contended.handoffs_per_s), 19) +
             padded(fmt("%.1f", row.single_commands_per_acquisition), 8);
      for (auto& q : row.quorums)
        out += " | " + padded(fmt("%.0f", q.contended.handoffs_per_s), 19) +
               padded(fmt("%.2f", median(q.handoff_rate_pairs)), 10) +
               padded(fmt("%.2f", median(q.handoff_latency_pairs)), 14) +
               padded(fmt("%.1f", q.commands_per_acquisition), 9) + std::to_string(q.overlaps) +
               (q.errors ? " (" + std::to_string(q.errors) + " errors)" : "");
      out += "\n";
    }
    out += "\nW workers on one lock, each with its own backend, in one process, in runs that alternate one\n"
           "server and each deployment. x single: the median over the pairs of runs of the deployment's\n"
           "hand-offs per second (above 1: faster) and hand-off p50 (above 1: slower) over one server's;\n"
           "cmds/acq: commands all nodes ran per acquisition besides the critical section's GET and SET\n"
           "(INFO commandstats, the workers' connects included); overlaps: holds that overlapped.\n";
  }
  if (!r.losses.empty()) {
    out += "\nfault: nodes killed one at a time (SIGKILL) under a client that locks and unlocks the default lock\n"
           "without pause; then, the client idle, one more (a majority dead):\n";
    for (auto& l : r.losses) {
      out += "  " + std::to_string(l.nodes) + " nodes, " + std::to_string(l.runs) + " run" + (l.runs == 1 ? "" : "s") +
             ": between acquires " + fmt("%.2f ms", l.healthy_gap_ms) + " before any kill\n";
      for (std::size_t k = 0; k < l.death_to_acquire_ms.size(); ++k)
        out += "    " + ordinal(k) + " node killed, to the first acquire begun after it (min / median / max): " +
               spread_ms(l.death_to_acquire_ms[k]) + " (" + std::to_string(l.death_to_acquire_ms[k].size()) +
               " runs)\n";
      out += "    a majority dead: no_quorum naming every dead node in " + of(l.majority_lost_refused, l.runs) +
             ", the lock left on a live node in " + of(l.left_held, l.runs) + "\n";
    }
  }
  if (!r.stalls.empty()) {
    out += "\nfault: one node stalled (SIGSTOP), try_lock() votes of the default lock, each released:\n";
    for (auto& s : r.stalls) {
      out += "  " + std::to_string(s.nodes) + " nodes (reply timeout " + fmt("%.0f ms", s.reply_timeout_ms) +
             "): acquired " + of(s.acquired, s.attempts) + "; a vote's p50 " + fmt("%.2f ms", s.healthy_acquire.p50_us / 1000) +
             " with every node answering, " + fmt("%.2f ms", s.stalled_acquire.p50_us / 1000) + " (p99 " +
             fmt("%.2f ms", s.stalled_acquire.p99_us / 1000) + ") with one stalled" +
             (s.errors ? ", " + std::to_string(s.errors) + " errors (" + s.first_error + ")" : "") + "\n";
    }
  }
  if (r.restart) {
    auto& s = *r.restart;
    out += "\nfault: the restart story (3 nodes without persistence, lease " + fmt("%.0f ms", s.lease_ms) + "), " +
           std::to_string(s.runs) + " run" + (s.runs == 1 ? "" : "s") + " of each act:\n";
    out += "  restart at once:           two holders in " + of(s.at_once_overlaps, s.runs) + ", B locked in " +
           of(s.at_once_b_held, s.runs) + ", crash to B's lock " + spread_ms(s.at_once_b_after_ms) + "\n";
    out += "  delayed restart (" + fmt("%.0f ms", s.delayed_ms) + " out): two holders in " +
           of(s.delayed_overlaps, s.runs) + ", B locked in " + of(s.delayed_b_held, s.runs) + ", crash to B's lock " +
           spread_ms(s.delayed_b_after_ms) + "\n";
  }
  return out;
}

std::string redlock_json(const redlock_result& r) {
  std::string out = "{\"deployment\": " + quoted(r.deployment) + ", \"sizes\": [";
  for (std::size_t i = 0; i < r.sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(r.sizes[i]);
  out += "],\n    \"rows\": [";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    auto& row = r.rows[i];
    out += (i ? ",\n      " : "\n      ");
    out += "{\"name\": " + quoted(row.name) + ", \"single\": " + latency_json(row.single, 0) +
           ", \"workers\": " + std::to_string(row.workers) +
           ",\n       \"single_contended\": " + contention_json(row.single_contended, 0) +
           ", \"single_commands_per_acquisition\": " + number(row.single_commands_per_acquisition) +
           ",\n       \"quorums\": [";
    for (std::size_t k = 0; k < row.quorums.size(); ++k) {
      auto& q = row.quorums[k];
      out += (k ? ",\n         " : "\n         ");
      out += "{\"nodes\": " + std::to_string(q.nodes) + ", \"cycle\": " + latency_json(q.cycle, 0) +
             ", \"cycle_vs_single\": " + number(median(q.cycle_pairs)) + ", \"cycle_pairs\": " +
             number_list(q.cycle_pairs) + ",\n          \"contended\": " + contention_json(q.contended, 0) +
             ",\n          \"commands_per_acquisition\": " + number(q.commands_per_acquisition) +
             ", \"handoff_rate_vs_single\": " + number(median(q.handoff_rate_pairs)) +
             ", \"handoff_rate_pairs\": " + number_list(q.handoff_rate_pairs) +
             ", \"handoff_p50_vs_single\": " + number(median(q.handoff_latency_pairs)) +
             ", \"handoff_p50_pairs\": " + number_list(q.handoff_latency_pairs) +
             ", \"overlaps\": " + std::to_string(q.overlaps) + ", \"errors\": " + std::to_string(q.errors) + "}";
    }
    out += "]}";
  }
  out += "],\n    \"node_loss\": [";
  for (std::size_t i = 0; i < r.losses.size(); ++i) {
    auto& l = r.losses[i];
    out += (i ? ",\n      " : "\n      ");
    out += "{\"nodes\": " + std::to_string(l.nodes) + ", \"runs\": " + std::to_string(l.runs) +
           ", \"healthy_gap_ms\": " + number(l.healthy_gap_ms) + ", \"death_to_acquire_ms\": [";
    for (std::size_t k = 0; k < l.death_to_acquire_ms.size(); ++k)
      out += (k ? ", " : "") + number_list(l.death_to_acquire_ms[k]);
    out += "], \"majority_lost_refused\": " + std::to_string(l.majority_lost_refused) +
           ", \"left_held\": " + std::to_string(l.left_held) + "}";
  }
  out += "],\n    \"stalled\": [";
  for (std::size_t i = 0; i < r.stalls.size(); ++i) {
    auto& s = r.stalls[i];
    out += (i ? ",\n      " : "\n      ");
    out += "{\"nodes\": " + std::to_string(s.nodes) + ", \"attempts\": " + std::to_string(s.attempts) +
           ", \"acquired\": " + std::to_string(s.acquired) + ", \"reply_timeout_ms\": " + number(s.reply_timeout_ms) +
           ", \"healthy_acquire\": " + latency_json(s.healthy_acquire, 0) + ", \"stalled_acquire\": " +
           latency_json(s.stalled_acquire, 0) + ", \"errors\": " + std::to_string(s.errors) +
           ", \"first_error\": " + quoted(s.first_error) + "}";
  }
  out += "],\n    \"restart\": ";
  if (r.restart) {
    auto& s = *r.restart;
    out += "{\"runs\": " + std::to_string(s.runs) + ", \"lease_ms\": " + number(s.lease_ms) +
           ", \"delayed_ms\": " + number(s.delayed_ms) + ", \"at_once_overlaps\": " +
           std::to_string(s.at_once_overlaps) + ", \"at_once_b_held\": " + std::to_string(s.at_once_b_held) +
           ", \"delayed_overlaps\": " + std::to_string(s.delayed_overlaps) + ", \"delayed_b_held\": " +
           std::to_string(s.delayed_b_held) + ", \"at_once_b_after_ms\": " + number_list(s.at_once_b_after_ms) +
           ", \"delayed_b_after_ms\": " + number_list(s.delayed_b_after_ms) +
           ",\n     \"timelines\": " + timelines_json(s.timelines) + "}";
  } else {
    out += "null";
  }
  return out + "}";
}

}  // namespace dlock::compare
