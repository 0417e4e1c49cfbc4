// lock_worker on ClusterBackend: the representative combinations (see
// lock_worker.cpp).
#include <dlock/backend/cluster.hpp>
#include <dlock/combinations.hpp>

#include "backend_fixtures.hpp"
#include "lock_worker.hpp"
#include "backend_instances.hpp"  // their Sentinel and Cluster locks, compiled once

namespace dlock::test::worker_process {

int on_cluster(const std::string& spec, char** argv) {
  ClusterBackend backend(spec);
  cluster_masters masters(backend);
  return run(
      backend, [&](const std::string& key) -> RedisBackend& { return masters.of(key); }, argv,
      combinations::representative<ClusterBackend>());
}

}  // namespace dlock::test::worker_process
