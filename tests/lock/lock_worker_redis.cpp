// lock_worker on one redis-server: every combination (see lock_worker.cpp).
#include <dlock/combinations.hpp>

#include "lock_worker.hpp"

namespace dlock::test::worker_process {

int on_redis(const std::string& spec, char** argv) {
  RedisBackend redis(spec);
  return run(
      redis, [&](const std::string&) -> RedisBackend& { return redis; }, argv, combinations::all<RedisBackend>());
}

}  // namespace dlock::test::worker_process
