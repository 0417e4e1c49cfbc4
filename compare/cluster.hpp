// dlock-compare's cluster phase (--backend cluster): every combination on a
// Redis Cluster that the run starts, against the same combination on one
// server started beside it, each figure a ratio of two measurements taken
// the same way in this run; many locks on one master against three; and
// what pub/sub waiting costs the cluster, sharded against classic.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <support/placement.hpp>

#include "report.hpp"

namespace dlock::compare {

struct cluster_plan {
  std::string filter;  ///< the combinations (options::filter)
  test::placement placement = test::placement::same;
  int cycles = 1000, pairs = 5;  ///< uncontended cycles per backend, in this many alternating blocks
  int contended_pairs = 2;       ///< runs of each backend per contended figure, alternating
  std::chrono::milliseconds contention{1000};
  int handoff_workers = 8;
  int many_workers = 16, many_backends = 4;
  std::vector<int> pubsub_workers{8, 32};
};

/// Starts the clusters (three masters with a replica each; one master and
/// three masters without replicas for the many-locks figure) and one
/// server, and measures. Throws std::runtime_error naming the combination
/// that failed.
cluster_result run_cluster(const cluster_plan& plan);

}  // namespace dlock::compare
