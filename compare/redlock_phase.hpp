// dlock-compare's Redlock phase (--backend redlock3, redlock5, or both):
// every combination a quorum allows, on deployments of 3 and 5 private
// redis-servers that the run starts, against the same combination on one
// server started beside them, each figure a ratio of two measurements
// taken the same way in this run; then the fault rows: nodes killed up to
// a minority (and one more), one node stalled, and the restart story.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <support/placement.hpp>

#include "report.hpp"

namespace dlock::compare {

struct redlock_plan {
  std::string filter;      ///< the combinations (options::filter)
  std::vector<int> sizes;  ///< node counts: {3}, {5} or {3, 5}
  test::placement placement = test::placement::same;
  int cycles = 1000, pairs = 5;  ///< uncontended cycles per backend, in this many alternating blocks
  int contended_pairs = 2;       ///< runs of each backend per contended figure, alternating
  std::chrono::milliseconds contention{1000};
  int handoff_workers = 8;
  int loss_runs = 3;       ///< runs of the killed-minority row, per size
  int stall_attempts = 50; ///< votes with a node stalled (and as many healthy), per size
  int restart_runs = 20;   ///< runs of each act of the restart story
};

/// Starts the deployments and one server, and measures. Throws
/// std::runtime_error naming the combination that failed.
redlock_result run_redlock(const redlock_plan& plan);

// The fault rows (redlock_faults.cpp), each on deployments of its own.

/// Kills nodes of an `nodes`-node deployment one at a time under a client
/// that locks and unlocks without pause (the default lock), `runs` times;
/// each kill is timed to the answer of the first acquire begun after it.
node_loss_row node_loss(int nodes, int runs);
/// `attempts` try_lock() votes with every node answering, then as many with
/// one node stalled (SIGSTOP).
stalled_row stalled_node(int nodes, int attempts);
/// The restart story, `runs` times each act.
restart_row restart_story(int runs);

}  // namespace dlock::compare
