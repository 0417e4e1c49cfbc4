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
