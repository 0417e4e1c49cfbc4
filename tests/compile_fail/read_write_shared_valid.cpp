// expect: nothing (the control: a read-write lock has the shared interface)
#include <shared_mutex>

#include <dlock/dlock.hpp>
void f(dlock::Lock<dlock::RedisBackend, dlock::ownership::ReadWrite, dlock::renewal::Watchdog, dlock::wait::PubSub>& lock) {
  std::shared_lock reading(lock);
  auto hold = lock.try_acquire_shared_for(std::chrono::seconds(1));
}
