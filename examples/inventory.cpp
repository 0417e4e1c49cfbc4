// Seed 001's inventory story: 1000 orders each take one item from a stock of
// 1001, kept in Redis and updated the unsafe way (GET, then SET). Without a
// lock, updates are lost; under dlock's default lock the stock ends at 1.
//
//   inventory [redis://host:port]
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dlock/dlock.hpp>
#include "example_redis.hpp"

namespace {

constexpr int orders = 1000, initial_stock = 1001, threads = 8;

// Takes one item: read, compute, write back (a lost update when two overlap).
void take_one(dlock::RedisBackend& redis) {
  auto v = redis.command(dlock::redis::request().push("GET", "stock"));
  long long stock = std::stoll(v.str);
  redis.command(dlock::redis::request().push("SET", "stock", stock - 1));
}

template <class Guard>
long long run(dlock::RedisBackend& redis, Guard&& guarded) {
  redis.command(dlock::redis::request().push("SET", "stock", initial_stock));
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      while (next++ < orders) guarded([&] { take_one(redis); });
    });
  for (auto& t : pool) t.join();
  return std::stoll(redis.command(dlock::redis::request().push("GET", "stock")).str);
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url);

  long long unlocked = run(redis, [](auto&& work) { work(); });
  std::printf("without a lock: %d orders left %lld items (expected 1)\n", orders, unlocked);

  dlock::Lock<> lock(redis, "lock:stock");  // reentrant hash, watchdog, pub/sub
  long long locked = run(redis, [&](auto&& work) {
    std::scoped_lock guard(lock);
    work();
  });
  std::printf("with %s: %d orders left %lld items\n", lock.combination_name().c_str(), orders, locked);
  return locked == 1 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "inventory: %s\n", e.what());
  return 2;
}
