// Where the lock tests find their worker program.
#include "lock_support.hpp"

namespace dlock::test {

std::string worker_path() {
#ifdef DLOCK_WORKER_PATH
  return DLOCK_WORKER_PATH;
#else
  return "./lock_worker";
#endif
}

}  // namespace dlock::test

#include "backend_fixtures.hpp"

namespace dlock::test {

redis_cluster& shared_cluster() {
  static redis_cluster cluster(cluster_options{.masters = 3, .replicas_per_master = 1});
  return cluster;
}

sentinel_deployment& shared_sentinel() {
  static sentinel_deployment deployment(sentinel_options{.replicas = 1, .sentinels = 1, .quorum = 1});
  return deployment;
}

}  // namespace dlock::test
