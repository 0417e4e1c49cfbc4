// A file that takes the default lock, Lock<>, as README's first example
// does: what most users pay per file. Lock<> is compiled in libdlock, so
// this file should compile little more than the headers (`./dev bench
// compile`).
#include <dlock/dlock.hpp>

#include <chrono>
#include <mutex>

int main() {
  dlock::RedisBackend backend("redis://127.0.0.1:7777");
  dlock::Lock<> lock(backend, "orders:42");
  {
    std::lock_guard guard(lock);
  }
  if (lock.try_lock_for(std::chrono::seconds(1))) lock.unlock();
}
