// dlock-compare's contention phase. W workers, spread over two processes,
// each with its own backend (its own connections), run the inventory's
// critical section on one lock for a fixed time: take the lock, GET a
// counter, SET it one higher, release. Every cycle is stamped on
// CLOCK_MONOTONIC, which all processes of the machine share:
//   cycle <worker> <acquire answered> <release sent> <release answered>
// The parent merges the stamps into figures and a hold history.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/child_process.hpp>
#include <support/hold_history.hpp>

#include "report.hpp"

namespace dlock::compare {

/// One worker process's share of a contention run.
struct worker_args {
  std::string combination, url, lock, counter, id;
  int threads = 1;
  std::int64_t start_ns = 0, duration_ns = 0;
};

/// The stamps of one cycle, in CLOCK_MONOTONIC nanoseconds.
struct cycle {
  std::string worker;
  std::int64_t acquired = 0, release_sent = 0, released = 0;
};

namespace detail {

inline void sleep_until_ns(std::int64_t t) {
  auto left = t - test::monotonic_ns();
  if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
}

// Takes the lock before `deadline_ns`: the wait policy waits (TryOnce: the
// caller retries every millisecond, as user code around a try-once lock
// would). False when the deadline passed first.
template <class L>
bool take(L& lock, std::int64_t deadline_ns) {
  for (;;) {
    auto left = deadline_ns - test::monotonic_ns();
    if (left <= 0) return false;
    if constexpr (std::is_same_v<typename L::wait_type, wait::TryOnce>) {
      if (lock.try_lock()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      return lock.try_lock_for(std::chrono::nanoseconds(left));
    }
  }
}

}  // namespace detail

/// The inventory's GET or SET on `key`: on a backend that routes by key
/// (ClusterBackend), to the master of its slot; on a quorum
/// (RedlockBackend), to its first node (the counter is plain data, not a
/// vote: one copy).
template <class B>
redis::value keyed_command(B& backend, const std::string& key, redis::request req) {
  if constexpr (requires { backend.command(key, req); }) return backend.command(key, std::move(req));
  else if constexpr (contract::backend_quorum<B>) return backend.node(0).command(std::move(req));
  else return backend.command(std::move(req));
}

/// One worker's cycles on `lock` (on `backend`) from `start_ns` to
/// `end_ns`: take the lock, GET the counter, SET it one higher, release,
/// each cycle stamped into `cycles`; failures go to `errors`.
template <class L, class B>
void worker_cycles(B& backend, L& lock, const std::string& me, const std::string& counter, std::int64_t start_ns,
                   std::int64_t end_ns, std::vector<cycle>& cycles, std::vector<std::string>& errors) {
  detail::sleep_until_ns(start_ns);
  while (test::monotonic_ns() < end_ns) {
    if (!detail::take(lock, end_ns)) break;
    cycle c{me, test::monotonic_ns()};
    auto v = keyed_command(backend, counter, redis::request().push("GET", counter));
    long long n = v.is_null() ? 0 : std::stoll(v.str);
    keyed_command(backend, counter, redis::request().push("SET", counter, n + 1));
    c.release_sent = test::monotonic_ns();
    std::error_code ec;
    lock.unlock(ec);
    c.released = test::monotonic_ns();
    if (ec) errors.push_back(me + " unlock: " + ec.message());
    cycles.push_back(std::move(c));
  }
}

/// The worker side: runs `a.threads` threads of cycles on lock type L and
/// returns the lines to print ("cycle ..." per cycle, "error ..." per
/// failure).
template <class L>
std::vector<std::string> run_workers(const worker_args& a) {
  std::vector<std::vector<std::string>> out(static_cast<std::size_t>(a.threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < a.threads; ++t) {
    pool.emplace_back([&, t] {
      auto& lines = out[static_cast<std::size_t>(t)];
      const std::string me = a.id + "." + std::to_string(t);
      std::vector<cycle> cycles;
      std::vector<std::string> errors;
      try {
        RedisBackend redis(a.url);
        L lock(redis, a.lock);
        worker_cycles(redis, lock, me, a.counter, a.start_ns, a.start_ns + a.duration_ns, cycles, errors);
      } catch (const std::exception& e) {
        errors.push_back(me + " " + e.what());
      }
      for (auto& c : cycles)
        lines.push_back("cycle " + c.worker + " " + std::to_string(c.acquired) + " " + std::to_string(c.release_sent) +
                        " " + std::to_string(c.released));
      for (auto& e : errors) lines.push_back("error " + e);
    });
  }
  for (auto& t : pool) t.join();
  std::vector<std::string> all;
  for (auto& lines : out) all.insert(all.end(), lines.begin(), lines.end());
  return all;
}

/// Starts worker process `p` (0 or 1) of a run: `threads` workers from
/// `start_ns` for `duration_ns`, printing the lines run_workers returns.
using launch_fn = std::function<std::unique_ptr<test::child_process>(int p, int threads, std::int64_t start_ns,
                                                                     std::int64_t duration_ns)>;

/// How long a contention run lasts, and how long its processes get to start.
struct run_times {
  std::chrono::milliseconds duration, start_delay;
};

/// One contention run of the lock named `name` (for messages) with
/// `workers` workers, half in each of two processes that `launch` starts;
/// `lock` is the lock's key and `counter` the inventory's. The parent's
/// part: sets the counter, counts the server's commands (INFO
/// commandstats) before and after, merges the processes' cycles.
contention_result contend(RedisBackend& redis, const std::string& name, const std::string& lock,
                          const std::string& counter, int workers, run_times times, const launch_fn& launch,
                          double ping_us);

/// All commands a server has run, from its `INFO commandstats` text: the
/// server's work, which counts the commands a script runs as well as the
/// script.
std::int64_t total_calls(const std::string& info_commandstats);

/// A number of an INFO (or CLUSTER INFO) text, "field:value"; 0 if absent.
double info_number(const std::string& text, const std::string& field);

/// What the parent computes from the merged cycles of one run.
contention_result summarize(int workers, std::int64_t duration_ns, std::vector<cycle> cycles,
                            const test::hold_history& history, std::int64_t counter, double ping_us);

/// A window of `cycles` (of the run's `workers`, by name: a lane each) as a
/// timeline: up to 60 holds, at most a second, from the middle of the run.
timeline strip_of(std::vector<cycle> cycles, const std::vector<std::string>& workers);

/// Parses "cycle ..." lines into `cycles` and the history (lock `lock`);
/// returns the "error ..." lines.
std::vector<std::string> collect(const std::string& output, const std::string& lock, std::vector<cycle>& cycles,
                                 test::hold_history& history);

}  // namespace dlock::compare
