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
//   lock_worker pause-hold URL COMBINATION NAME LEASE_MS  "acquired <ns>", waits for a line on stdin, then
//                                                   its hold line, "remaining <ms>", "release <outcome>", "done"
//   lock_worker fenced-pause-hold ...               the same with fencing tokens on (where the ownership
//                                                   has them), and "token <n|none>" before its hold line
//   lock_worker churn URL COMBINATION PREFIX,LOCKS,LEASE_MS,LOG MS
//                                                   "started", takes and releases locks PREFIX.<i> at
//                                                   random for MS, logging each hold to LOG (churn.hpp),
//                                                   "done"
//   (and the semaphore's, read-write lock's and scoped_lock's modes: lock_worker_kinds.cpp)
//
// Each backend's combinations are compiled in their own file
// (lock_worker_<backend>.cpp); this one picks among them.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include <dlock/backend/redis.hpp>
#include <dlock/lock.hpp>
#include <dlock/ownership/setnx.hpp>
#include <dlock/renewal/fixed_lease.hpp>
#include <dlock/wait/try_once.hpp>

#include "lock_worker.hpp"

namespace dlock::test::worker_process {

int worker_usage() {
  std::fprintf(stderr, "usage: lock_worker count|hold|line|churn|pause-hold|fenced-pause-hold|wall-clock-step|"
               "crash-after-setnx|semaphore-hold|semaphore-crowd|"
               "rw-crowd|rw-hold|scoped-many ...\n");
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

  if (int status = worker::lock_kinds(argc, argv); status != worker::not_this_mode) return status;

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
