// lock_worker's modes for the kinds of lock beyond the exclusive one (see
// lock_worker.cpp): a semaphore's crowd and a killed permit holder, a
// read-write lock's mixed crowd and a killed reader, and std::scoped_lock
// over locks of several ownerships.
//
//   lock_worker semaphore-crowd URL NAME PERMITS ROUNDS THREADS
//   lock_worker semaphore-hold URL NAME PERMITS LEASE_MS  a permit, "acquired", sleep
//   lock_worker rw-crowd URL NAME THREADS ROUNDS   readers and writers; a "hold" line
//                                                   per hold (support/hold_history.hpp), "done"
//   lock_worker rw-hold URL NAME LEASE_MS          a shared hold, "acquired", sleep
//   lock_worker scoped-many URL NAME forward|reverse THREADS ROUNDS
//                                                   std::scoped_lock over four locks
//                                                   NAME:a..d, in that order or the other;
//                                                   a "hold NAME ..." line per hold, "done"
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <support/hold_history.hpp>

#include "lock_worker.hpp"
#include "on_threads.hpp"

namespace dlock::test::worker_process {

namespace {

namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
using std::chrono::milliseconds;

// The spans of this process's holds, printed at the end in one go.
struct span_log {
  std::mutex m;
  std::vector<hold_span> spans;
  void add(hold_span s) {
    std::lock_guard g(m);
    spans.push_back(std::move(s));
  }
  void print() {
    std::lock_guard g(m);
    for (auto& s : spans) std::printf("%s\n", s.format().c_str());
  }
};

std::string worker_name(int thread) {
  return "p" + std::to_string(::getpid()) + ".t" + std::to_string(thread);
}

int semaphore_crowd(char** argv) {
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
  int failures = on_threads(std::atoi(argv[6]), "lock_worker semaphore-crowd", [&](int) {
    RedisBackend redis(argv[2]);
    Lock<RedisBackend, o::Semaphore, r::FixedLease, w::Spin> lock(redis, name, o::Semaphore{permits},
                                                                   r::FixedLease{std::chrono::seconds(30)},
                                                                   w::Spin{milliseconds(2)});
    for (long long i = 0; i < rounds; ++i) {
      auto hold = lock.acquire();
      redis.command(redis::request().push("EVAL", enter, 2, inside, most));
      std::this_thread::sleep_for(milliseconds(2));
      redis.command(redis::request().push("DECR", inside));
      hold.release();
    }
  });
  std::printf("done\n");
  return failures == 0 ? 0 : 1;
}

[[noreturn]] void hold_until_killed(bool held) {
  std::printf(held ? "acquired\n" : "refused\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

int semaphore_hold(char** argv) {
  // One permit of semaphore argv[3] (argv[4] permits, lease argv[5] ms),
  // held until the process is killed: a crashed permit holder.
  RedisBackend redis(argv[2]);
  Lock<RedisBackend, o::Semaphore, r::FixedLease, w::TryOnce> lock(redis, argv[3], o::Semaphore{std::atoll(argv[4])},
                                                                   r::FixedLease{milliseconds(std::atol(argv[5]))});
  auto hold = lock.try_acquire();
  hold_until_killed(hold.has_value());
}

int rw_crowd(char** argv) {
  // argv[4] threads, argv[5] rounds each: every fourth round (by thread and
  // round) a write, the others reads, each held 2 ms. The lock renews by
  // watchdog and wakes by pub/sub, as a service would use it.
  const std::string name = argv[3];
  const long long rounds = std::atoll(argv[5]);
  RedisBackend redis(argv[2]);
  Lock<RedisBackend, o::ReadWrite, r::Watchdog, w::PubSub> lock(redis, name);
  span_log log;
  int failures = on_threads(std::atoi(argv[4]), "lock_worker rw-crowd", [&](int t) {
    for (long long i = 0; i < rounds; ++i) {
      const bool write = (i + t) % 4 == 0;
      hold_span span{name, worker_name(t), 0, 0, !write};
      if (write) {
        std::unique_lock held(lock);
        span.start_ns = monotonic_ns();
        std::this_thread::sleep_for(milliseconds(2));
        span.end_ns = monotonic_ns();
      } else {
        std::shared_lock held(lock);
        span.start_ns = monotonic_ns();
        std::this_thread::sleep_for(milliseconds(2));
        span.end_ns = monotonic_ns();
      }
      log.add(std::move(span));
    }
  });
  log.print();
  std::printf("done\n");
  return failures == 0 ? 0 : 1;
}

int rw_hold(char** argv) {
  // A shared hold of argv[3] (lease argv[4] ms), held until the process is
  // killed: a crashed reader.
  RedisBackend redis(argv[2]);
  Lock<RedisBackend, o::ReadWrite, r::FixedLease, w::TryOnce> lock(redis, argv[3], {},
                                                                   r::FixedLease{milliseconds(std::atol(argv[4]))});
  auto hold = lock.try_acquire_shared();
  hold_until_killed(hold.has_value());
}

int scoped_many(char** argv) {
  // argv[5] threads, argv[6] rounds each, take four locks of four
  // ownerships with one std::scoped_lock, in the order argv[4] says: a
  // token lock, a reentrant hash, a one-permit semaphore and a read-write
  // lock's write side. Each thread has its own locks on the process's
  // backend.
  const std::string name = argv[3];
  const bool reversed = std::string(argv[4]) == "reverse";
  const long long rounds = std::atoll(argv[6]);
  RedisBackend redis(argv[2]);
  span_log log;
  int failures = on_threads(std::atoi(argv[5]), "lock_worker scoped-many", [&](int t) {
    Lock<RedisBackend, o::Token, r::FixedLease, w::Spin> a(redis, name + ":a", {}, r::FixedLease{std::chrono::seconds(30)},
                                                           w::Spin{milliseconds(2)});
    Lock<RedisBackend, o::ReentrantHash, r::Watchdog, w::PubSub> b(redis, name + ":b");
    Lock<RedisBackend, o::Semaphore, r::FixedLease, w::Backoff> c(redis, name + ":c", o::Semaphore{1},
                                                                  r::FixedLease{std::chrono::seconds(30)},
                                                                  w::Backoff{milliseconds(1), milliseconds(20)});
    Lock<RedisBackend, o::ReadWrite, r::Watchdog, w::PubSub> d(redis, name + ":d");
    for (long long i = 0; i < rounds; ++i) {
      hold_span span{name, worker_name(t), 0, 0};
      auto work = [&] {
        span.start_ns = monotonic_ns();
        std::this_thread::sleep_for(milliseconds(1));
        span.end_ns = monotonic_ns();
      };
      if (reversed) {
        std::scoped_lock all(d, c, b, a);
        work();
      } else {
        std::scoped_lock all(a, b, c, d);
        work();
      }
      log.add(std::move(span));
    }
  });
  log.print();
  std::printf("done\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int lock_kinds(int argc, char** argv) {
  const std::string mode = argv[1];
  if (mode == "semaphore-crowd" && argc == 7) return semaphore_crowd(argv);
  if (mode == "semaphore-hold" && argc == 6) return semaphore_hold(argv);
  if (mode == "rw-crowd" && argc == 6) return rw_crowd(argv);
  if (mode == "rw-hold" && argc == 5) return rw_hold(argv);
  if (mode == "scoped-many" && argc == 7) return scoped_many(argv);
  return not_this_mode;
}

}  // namespace dlock::test::worker_process
