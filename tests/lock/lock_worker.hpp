// lock_worker's parts (see lock_worker.cpp): main() picks the backend from
// the URL, and each backend's combinations are compiled in a file of their
// own (lock_worker_<backend>.cpp), so that the build runs them in parallel.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <boost/hana/for_each.hpp>

#include "lock_support.hpp"

namespace dlock::test::worker_process {

/// Prints the usage line; returns 2.
int worker_usage();

// Each runs the mode of argv (lock_worker's own) with the combination named
// argv[3], on the servers that `spec` (argv[2], without its prefix) names.
int on_redis(const std::string& spec, char** argv);
int on_shards(const std::string& spec, char** argv);
int on_acknowledged_sentinel(const std::string& spec, char** argv);
int on_sentinel(const std::string& spec, char** argv);
int on_cluster(const std::string& spec, char** argv);
int on_redlock(const std::string& spec, char** argv);

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
