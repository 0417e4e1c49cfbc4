// lock_worker on SentinelBackend (see lock_worker.cpp): the representative
// combinations, and with replica acknowledgement on, those that take it.
#include <dlock/backend/sentinel.hpp>
#include <dlock/combinations.hpp>

#include "backend_fixtures.hpp"
#include "lock_worker.hpp"
#include "backend_instances.hpp"  // their Sentinel and Cluster locks, compiled once

namespace dlock::test::worker_process {

int on_sentinel(const std::string& spec, char** argv) {
  SentinelBackend backend(spec);
  return run(
      backend, [&](const std::string&) -> RedisBackend& { return backend; }, argv,
      combinations::representative<SentinelBackend>());
}

// `spec`: a redis-sentinel URL; acknowledgement on, as the test's
// acknowledged_sentinel_servers.
int on_acknowledged_sentinel(const std::string& spec, char** argv) {
  SentinelBackend backend(acknowledged_sentinel_config(spec));
  return run(
      backend, [&](const std::string&) -> RedisBackend& { return backend; }, argv,
      combinations::acknowledgeable<SentinelBackend>());
}

}  // namespace dlock::test::worker_process
