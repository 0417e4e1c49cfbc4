// A file that takes a combination libdlock does not compile in advance: it
// instantiates the lock's engine for its four policies (`./dev bench
// compile`).
#include <dlock/dlock.hpp>

#include <chrono>
#include <mutex>

int main() {
  dlock::RedisBackend backend("redis://127.0.0.1:7777");
  dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::Spin> lock(
      backend, "orders:42");
  {
    std::lock_guard guard(lock);
  }
  if (lock.try_lock_for(std::chrono::seconds(1))) lock.unlock();
}
