// lock_worker in a build of the tests for one server only
// (-Dtest_backends=one_server: ./dev test's sanitizer build), which leaves
// out the other backends' combinations: their modes say so and fail.
#include <cstdio>

#include "lock_worker.hpp"

namespace dlock::test::worker_process {

namespace {

int left_out(const char* backend) {
  std::fprintf(stderr, "lock_worker: this build is for one server only (-Dtest_backends=one_server); %s needs "
                       "-Dtest_backends=all\n", backend);
  return 2;
}

}  // namespace

int on_shards(const std::string&, char**) { return left_out("examples::ShardedBackend"); }
int on_acknowledged_sentinel(const std::string&, char**) { return left_out("SentinelBackend"); }
int on_sentinel(const std::string&, char**) { return left_out("SentinelBackend"); }
int on_cluster(const std::string&, char**) { return left_out("ClusterBackend"); }
int on_redlock(const std::string&, char**) { return left_out("RedlockBackend"); }

}  // namespace dlock::test::worker_process
