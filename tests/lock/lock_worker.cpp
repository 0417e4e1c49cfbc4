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
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <thread>

#include <dlock/backend/sentinel.hpp>
#include <dlock/combinations.hpp>

#include "../../examples/sharded_backend.hpp"

#include "backend_fixtures.hpp"
#include "lock_support.hpp"

namespace {

int usage() {
  std::fprintf(stderr, "usage: lock_worker count|hold|line|crash-after-setnx ...\n");
  return 2;
}

// Runs `mode` for the combination named argv[3] (one of `locks`, a hana
// list of lock types) on `backend`; `plain(key)` is a RedisBackend on the
// server that holds `key` (the test's counters).
template <class Backend, class Plain, class Locks>
int run(Backend& backend, Plain plain, char** argv, Locks locks) {
  using namespace std::chrono_literals;
  std::string mode = argv[1], combination = argv[3], name = argv[4];
  long long number = std::atoll(argv[5]);
  bool found = false;
  int status = 0;
  boost::hana::for_each(locks, [&](auto type) {
    using L = typename decltype(type)::type;
    if (found || L::combination_name() != combination) return;
    found = true;
    if (mode == "count") {
      auto lock = dlock::test::make_lock<L>(backend, name);
      const std::string counter = name + ":counter";
      for (long long i = 0; i < number; ++i) {
        if (auto ec = dlock::test::increment_under(*lock, plain(counter), counter)) {
          std::fprintf(stderr, "lock_worker: unlock failed: %s\n", ec.message().c_str());
          status = 1;
        }
      }
      std::printf("done\n");
    } else if (mode == "line") {
      auto lock = dlock::test::make_lock<L>(backend, name);
      std::printf("waiting\n");
      std::fflush(stdout);
      lock->lock();
      plain(name + ":order").command(dlock::redis::request().push("RPUSH", name + ":order", number));
      lock->unlock();
      std::printf("done\n");
    } else if (mode == "hold") {
      auto lock = dlock::test::make_lock<L>(backend, name, std::chrono::milliseconds(number));
      auto hold = lock->acquire();
      std::printf("acquired\n");
      std::fflush(stdout);
      for (;;) std::this_thread::sleep_for(1h);
    } else {
      status = usage();
    }
  });
  if (!found) {
    std::fprintf(stderr, "lock_worker: no valid combination named %s\n", combination.c_str());
    return 2;
  }
  std::fflush(stdout);
  return status;
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace std::chrono_literals;
  if (argc < 2) return usage();
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

  if (argc != 6) return usage();
  std::string spec = argv[2];
  if (spec.rfind("shards:", 0) == 0) {
    // "shards:<url>,<url>,...": the same ShardedBackend as the test's.
    std::vector<std::string> urls;
    std::string rest = spec.substr(7);
    for (std::size_t at = 0; at <= rest.size();) {
      auto comma = rest.find(',', at);
      if (comma == std::string::npos) comma = rest.size();
      urls.push_back(rest.substr(at, comma - at));
      at = comma + 1;
    }
    dlock::examples::ShardedBackend backend(urls);
    return run(
        backend, [&](const std::string& key) -> dlock::RedisBackend& { return backend.shard_for(key); }, argv,
        dlock::combinations::all<dlock::examples::ShardedBackend>());
  }
  if (spec.rfind("ack:", 0) == 0) {
    // "ack:<redis-sentinel URL>": replica acknowledgement on, as the test's
    // acknowledged_sentinel_servers.
    dlock::SentinelBackend backend(dlock::test::acknowledged_sentinel_config(spec.substr(4)));
    return run(
        backend, [&](const std::string&) -> dlock::RedisBackend& { return backend; }, argv,
        dlock::combinations::acknowledgeable<dlock::SentinelBackend>());
  }
  if (spec.rfind("cluster:", 0) == 0) {
    dlock::ClusterBackend backend(spec.substr(8));
    dlock::test::cluster_masters masters(backend);
    return run(
        backend, [&](const std::string& key) -> dlock::RedisBackend& { return masters.of(key); }, argv,
        dlock::combinations::representative<dlock::ClusterBackend>());
  }
  if (spec.rfind("redis-sentinel://", 0) == 0) {
    dlock::SentinelBackend backend(spec);
    return run(
        backend, [&](const std::string&) -> dlock::RedisBackend& { return backend; }, argv,
        dlock::combinations::representative<dlock::SentinelBackend>());
  }
  dlock::RedisBackend redis(spec);
  return run(
      redis, [&](const std::string&) -> dlock::RedisBackend& { return redis; }, argv,
      dlock::combinations::all<dlock::RedisBackend>());
} catch (const std::exception& e) {
  std::fprintf(stderr, "lock_worker: %s\n", e.what());
  return 1;
}
