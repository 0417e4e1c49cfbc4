// lock_worker's parts (see lock_worker.cpp): main() picks the backend from
// the URL, and each backend's combinations are compiled in a file of their
// own (lock_worker_<backend>.cpp), so that the build runs them in parallel.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <boost/hana/for_each.hpp>

#include "churn.hpp"
#include "lock_support.hpp"

namespace dlock::test::worker_process {

/// Prints the usage line; returns 2.
int worker_usage();

/// What lock_kinds returns for a mode (or argument count) not its own.
inline constexpr int not_this_mode = -1;
/// The modes of the kinds of lock beyond the exclusive one (semaphore-*,
/// rw-*, scoped-many: lock_worker_kinds.cpp); their exit status.
int lock_kinds(int argc, char** argv);

// Each runs the mode of argv (lock_worker's own) with the combination named
// argv[3], on the servers that `spec` (argv[2], without its prefix) names.
int on_redis(const std::string& spec, char** argv);
int on_shards(const std::string& spec, char** argv);
int on_acknowledged_sentinel(const std::string& spec, char** argv);
int on_sentinel(const std::string& spec, char** argv);
int on_cluster(const std::string& spec, char** argv);
int on_redlock(const std::string& spec, char** argv);

/// Mode wall-clock-step, run under tests/support/skewed_clock.cpp with
/// DLOCK_CLOCK_STEP_FILE: holds lock `name` (lease `lease`), steps this
/// process's wall clock an hour forward, takes a second lock there, steps
/// it an hour back, and checks that the holds' time left followed the
/// steady clock alone. Prints "stepped: ..." and returns 0, or says what
/// went wrong and returns 1.
template <class L, class Backend>
int wall_clock_step(Backend& backend, const std::string& name, std::chrono::milliseconds lease) {
  using namespace std::chrono;
  const char* path = std::getenv("DLOCK_CLOCK_STEP_FILE");
  FILE* file = path ? std::fopen(path, "r+b") : nullptr;
  if (!file) {
    std::printf("no step file (DLOCK_CLOCK_STEP_FILE)\n");
    return 1;
  }
  auto step = [&](long long ms) {
    std::fseek(file, 0, SEEK_SET);
    std::fwrite(&ms, sizeof ms, 1, file);
    std::fflush(file);
  };
  auto first = dlock::test::make_lock<L>(backend, name, lease);
  auto second = dlock::test::make_lock<L>(backend, name + ":stepped", lease);
  const auto wall_before = system_clock::now();
  auto hold = first->acquire();
  const auto left_before = hold.remaining_lease();
  step(3600 * 1000);
  if (system_clock::now() - wall_before < minutes(59)) {
    std::printf("the wall clock did not move: is skewed_clock preloaded?\n");
    return 1;
  }
  const auto left_forward = hold.remaining_lease();
  auto other = second->acquire();
  const auto other_left = other.remaining_lease();
  step(-3600 * 1000);
  const auto left_back = hold.remaining_lease();
  step(0);
  std::fclose(file);
  std::printf("stepped: time left %lld ms, %lld ms an hour ahead, %lld ms an hour behind; a lock taken an hour "
              "ahead had %lld ms\n",
              static_cast<long long>(left_before.count()), static_cast<long long>(left_forward.count()),
              static_cast<long long>(left_back.count()), static_cast<long long>(other_left.count()));
  // Each reading is a little lower than the one before it, by the steady
  // time between them (well under a second), whatever the wall clock did.
  auto follows = [](milliseconds earlier, milliseconds later) {
    return later <= earlier && earlier - later < seconds(1);
  };
  const bool kept = !hold.lost() && !other.lost() && follows(left_before, left_forward) &&
                    follows(left_forward, left_back) && other_left > lease / 2;
  hold.release();
  other.release();
  if (!kept) std::printf("the wall clock's step changed a hold\n");
  return kept ? 0 : 1;
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
    } else if (mode == "pause-hold" || mode == "fenced-pause-hold") {
      // Takes `name` (lease `number` ms), says when, waits for a line on
      // its input (the test stops and resumes it meanwhile), then ends its
      // hold: its fencing token ("fenced-": fencing on, where the ownership
      // has it), its span, the lease it thought it had left, the release's
      // outcome.
      auto lock = dlock::test::make_lock<L>(backend, name, std::chrono::milliseconds(number),
                                            mode == "pause-hold" ? typename L::ownership_type{} : fenced_ownership<L>());
      // Tried again on what a loaded machine may answer (a reply, or the
      // replicas' WAIT, later than its timeout), as the churn does.
      std::optional<typename L::hold_type> hold;
      for (int tries = 0; !hold; ++tries) {
        std::error_code ec;
        hold = lock->try_acquire_for(std::chrono::milliseconds(number) * 4, ec);
        if (!hold && !(tries < 5 && (ec == dlock::error::outcome_unknown || ec == dlock::error::not_acknowledged ||
                                     ec == dlock::error::no_quorum))) {
          std::fprintf(stderr, "lock_worker pause-hold: %s\n", ec.message().c_str());
          status = 1;
          return;
        }
      }
      const auto start = monotonic_ns();
      std::printf("acquired %lld\n", static_cast<long long>(start));
      std::fflush(stdout);
      char line[16];
      if (!std::fgets(line, sizeof line, stdin)) {
        status = 1;
        return;
      }
      const hold_span span{name, "paused-holder", start, monotonic_ns(), false};
      if (mode != "pause-hold") {
        const auto token = hold->fencing_token();
        std::printf("token %s\n", token ? std::to_string(*token).c_str() : "none");
      }
      std::printf("%s\nremaining %lld\n", span.format().c_str(),
                  static_cast<long long>(hold->remaining_lease().count()));
      std::fflush(stdout);  // said even if the release hangs
      std::error_code ec;
      hold->release(ec);
      const std::string outcome = !ec ? "ok" : ec == dlock::error::lease_lost ? "lease_lost" : ec.message();
      std::printf("release %s\ndone\n", outcome.c_str());
    } else if (mode == "churn") {
      // argv[4] is a churn_plan's spec, argv[5] its length in ms.
      auto plan = churn_plan::parse(name, number);
      if (!plan) {
        status = worker_usage();
      } else {
        std::printf("started\n");
        std::fflush(stdout);
        churn<L>(backend, *plan, "p" + std::to_string(::getpid()));
        std::printf("done\n");
      }
    } else if (mode == "wall-clock-step") {
      status = wall_clock_step<L>(backend, name, std::chrono::milliseconds(number));
    } else {
      status = worker_usage();
    }
  });
  if (!found) {
    std::fprintf(stderr, "lock_worker: no valid combination named %s\n", combination.c_str());
    return 2;
  }
  std::fflush(stdout);
  return status;
}

}  // namespace dlock::test::worker_process
