// lock_worker on RedlockBackend: every combination a quorum allows (see
// lock_worker.cpp).
#include <dlock/backend/redlock.hpp>
#include <dlock/combinations.hpp>

#include "lock_worker.hpp"
#include "redlock_settings.hpp"

namespace dlock::test::worker_process {

int on_redlock(const std::string& spec, char** argv) {
  RedlockBackend backend(loaded_machine_redlock(spec));
  return run(
      backend, [&](const std::string&) -> RedisBackend& { return backend.node(0); }, argv,
      combinations::all<RedlockBackend>());
}

}  // namespace dlock::test::worker_process
