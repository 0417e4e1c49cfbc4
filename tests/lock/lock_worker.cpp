// A separate process for lock tests: increments a counter under a lock,
// or takes a lock and waits to be killed, for any valid combination by name.
//
//   (URL: a Redis URL, "shards:<url>,<url>" for examples::ShardedBackend, or
//   a redis-sentinel:// URL for SentinelBackend, or "cluster:<url>" for
//   ClusterBackend: their representative locks)
//   lock_worker count URL COMBINATION NAME N      N increments, then "done"
//   lock_worker hold URL COMBINATION NAME LEASE_MS take it, print "acquired", sleep
//   lock_worker crash-after-setnx URL NAME LEASE_MS  SetNx + FixedLease, exit between SETNX and EXPIRE
//   lock_worker line URL COMBINATION NAME INDEX     print "waiting", lock(), RPUSH NAME:order INDEX,
//                                                   unlock(), print "done" (the order of a line of waiters)
//
// Each backend's combinations are compiled in their own file
// (lock_worker_<backend>.cpp); this one picks among them.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <dlock/backend/redis.hpp>
#include <dlock/lock.hpp>
#include <dlock/ownership/semaphore.hpp>
#include <dlock/ownership/setnx.hpp>
#include <dlock/renewal/fixed_lease.hpp>
#include <dlock/wait/try_once.hpp>

#include "lock_worker.hpp"

namespace dlock::test::worker_process {

int worker_usage() {
  std::fprintf(stderr, "usage: lock_worker count|hold|line|wall-clock-step|crash-after-setnx|semaphore-hold|semaphore-crowd ...\n");
  return 2;
}

}  // namespace dlock::test::worker_process

int main(int argc, char** argv) try {
  namespace worker = dlock::test::worker_process;
  if (argc < 2) return worker::worker_usage();
  std::string mode = argv[1];

  if (mode == "crash-after-setnx" && argc == 5) {
    dlock::RedisBackend redis(argv[2]);
    dlock::ownership::SetNx setnx;
    setnx.between_setnx_and_expire = [] { _exit(3); };  // the crash, right between the two commands
    dlock::Lock<dlock::RedisBackend, dlock::ownership::SetNx, dlock::renewal::FixedLease, dlock::wait::TryOnce> lock(
        redis, argv[3], setnx, dlock::renewal::FixedLease{std::chrono::milliseconds(std::atol(argv[4]))});
    lock.try_lock();
    return 1;  // not reached when the lock was free
  }

  if (mode == "semaphore-crowd" && argc == 7) {
    // argv[6] threads, each taking a permit of semaphore argv[3] (argv[4]
    // permits) argv[5] times; while it holds one, it counts itself in
    // "<name>:inside" and raises "<name>:most" to the count it saw (one
    // script, so the count across processes is exact).
    static const char* enter = R"lua(
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
)lua";
    const std::string name = argv[3], inside = name + ":inside", most = name + ":most";
    const long long permits = std::atoll(argv[4]), rounds = std::atoll(argv[5]);
    std::vector<std::thread> pool;
    std::atomic<int> failures{0};
    for (int t = 0; t < std::atoi(argv[6]); ++t) {
      pool.emplace_back([&] {
        try {
          dlock::RedisBackend redis(argv[2]);
          dlock::Lock<dlock::RedisBackend, dlock::ownership::Semaphore, dlock::renewal::FixedLease, dlock::wait::Spin>
              lock(redis, name, dlock::ownership::Semaphore{permits}, dlock::renewal::FixedLease{std::chrono::seconds(30)},
                   dlock::wait::Spin{std::chrono::milliseconds(2)});
          for (long long i = 0; i < rounds; ++i) {
            auto hold = lock.acquire();
            redis.command(dlock::redis::request().push("EVAL", enter, 2, inside, most));
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            redis.command(dlock::redis::request().push("DECR", inside));
            hold.release();
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "lock_worker semaphore-crowd: %s\n", e.what());
          ++failures;
        }
      });
    }
    for (auto& t : pool) t.join();
    std::printf("done\n");
    return failures == 0 ? 0 : 1;
  }

  if (mode == "semaphore-hold" && argc == 6) {
    // One permit of semaphore argv[3] (argv[4] permits, lease argv[5] ms),
    // held until the process is killed: a crashed permit holder.
    dlock::RedisBackend redis(argv[2]);
    dlock::Lock<dlock::RedisBackend, dlock::ownership::Semaphore, dlock::renewal::FixedLease, dlock::wait::TryOnce> lock(
        redis, argv[3], dlock::ownership::Semaphore{std::atoll(argv[4])},
        dlock::renewal::FixedLease{std::chrono::milliseconds(std::atol(argv[5]))});
    auto hold = lock.try_acquire();
    std::printf(hold ? "acquired\n" : "refused\n");
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }

  if (argc != 6) return worker::worker_usage();
  std::string spec = argv[2];
  auto after = [&](const char* prefix) { return spec.substr(std::string(prefix).size()); };
  if (spec.rfind("shards:", 0) == 0) return worker::on_shards(after("shards:"), argv);
  if (spec.rfind("ack:", 0) == 0) return worker::on_acknowledged_sentinel(after("ack:"), argv);
  if (spec.rfind("cluster:", 0) == 0) return worker::on_cluster(after("cluster:"), argv);
  if (spec.rfind("redlock:", 0) == 0) return worker::on_redlock(after("redlock:"), argv);
  if (spec.rfind("redis-sentinel://", 0) == 0) return worker::on_sentinel(spec, argv);
  return worker::on_redis(spec, argv);
} catch (const std::exception& e) {
  std::fprintf(stderr, "lock_worker: %s\n", e.what());
  return 1;
}
