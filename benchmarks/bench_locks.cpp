// Every valid lock combination of the compile-time list, three ways, each
// with the PING round trip of the same run as a counter (`ping_us`) and its
// time as a ratio to it (`in_pings`):
// - lock_unlock/C: one uncontended acquire + release;
// - contended/C/threads:W: W threads, each with its own backend (its own
//   connections), take turns on one lock with an empty critical section;
//   the time per cycle is the hand-off from one holder to the next;
// - many_locks/C/N: N independent locks, each taken and released in turn
//   by its own chain of async calls, all over one backend: the aggregate
//   rate, which pipelining lifts above one chain's (N = 1);
// - lock_unlock_blocking/C: lock() + unlock() from the benchmark's thread;
// - floor/...: a Token cycle's commands (dlock's, and redis-py's) on a plain
//   blocking socket, the least any client could spend on them.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <boost/asio/io_context.hpp>

#include <dlock/combinations.hpp>
#include <lock/lock_instances.hpp>  // every combination on RedisBackend, compiled once

#include "bench_support.hpp"

namespace {

namespace asio = boost::asio;
using bench_clock = std::chrono::steady_clock;

constexpr int many = 64;  // many_locks' large N

double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

// Acquire then release through the async interface, with the io_context
// driven on the benchmark thread, as the PING baseline is.
template <class L>
void lock_unlock(benchmark::State& state) {
  asio::io_context ctx(1);
  dlock::RedisBackend redis(ctx.get_executor(), dlock::bench::server_target().url);
  L lock(redis, "bench:" + L::combination_name());
  auto run = [&](auto&& start) {
    bool done = false;
    dlock::error_code error;
    start([&](dlock::error_code ec, auto&&...) {
      error = ec;
      done = true;
    });
    while (!done) ctx.run_one();
    return error;
  };
  auto t0 = bench_clock::now();
  for (auto _ : state) {
    typename L::hold_type hold;
    auto ec = run([&](auto cb) {
      lock.async_acquire("bench", [&, cb](dlock::error_code e, typename L::hold_type h) mutable {
        hold = std::move(h);
        cb(e);
      });
    });
    if (!ec) ec = run([&](auto cb) { hold.async_release(cb); });
    if (ec) {
      state.SkipWithError(ec.message().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  dlock::bench::report_ping(state, seconds_since(t0) / static_cast<double>(state.iterations()));
}

// The same cycle through the blocking interface, as most code calls it:
// lock() and unlock() on a backend with its own I/O thread.
template <class L>
void lock_unlock_blocking(benchmark::State& state) {
  dlock::RedisBackend redis(dlock::bench::server_target().url);
  L lock(redis, "bench:blocking:" + L::combination_name());
  auto t0 = bench_clock::now();
  for (auto _ : state) {
    try {
      lock.lock();
      lock.unlock();
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  dlock::bench::report_ping(state, seconds_since(t0) / static_cast<double>(state.iterations()));
}

// The floor under an uncontended Token cycle: the commands a Token lock
// sends (or redis-py's Lock), written on a plain blocking socket with
// nothing around them.
void floor_token_cycle(benchmark::State& state, bool dlock_token) {
  using kind = dlock::bench::floor_cycle::kind;
  dlock::bench::floor_cycle floor(dlock::bench::server_target().url, dlock_token ? kind::token : kind::redis_py,
                                  dlock_token ? "bench:floor:dlock" : "bench:floor:redis-py");
  auto t0 = bench_clock::now();
  for (auto _ : state) {
    if (!floor.cycle()) {
      state.SkipWithError("a floor command failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  dlock::bench::report_ping(state, seconds_since(t0) / static_cast<double>(state.iterations()));
}

// One thread of a contended run: its own backend, its own Lock object on
// the shared name, blocking calls. A try-once lock is retried every
// millisecond, as user code around one would.
template <class L>
void contended(benchmark::State& state) {
  dlock::RedisBackend redis(dlock::bench::server_target().url);
  L lock(redis, "bench:contended:" + L::combination_name() + ":" + std::to_string(state.threads()));
  auto t0 = bench_clock::now();
  for (auto _ : state) {
    if constexpr (std::is_same_v<typename L::wait_type, dlock::wait::TryOnce>) {
      while (!lock.try_lock()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      lock.lock();
    }
    lock.unlock();
  }
  state.SetItemsProcessed(state.iterations());
  // Thread 0 reports for the run: its wall time over every thread's cycles.
  if (state.thread_index() == 0)
    dlock::bench::report_ping(state, seconds_since(t0) / static_cast<double>(state.iterations() * state.threads()));
}

// N locks over one backend; one iteration is one acquire + release on each.
template <class L>
void many_locks(benchmark::State& state) {
  asio::io_context ctx(1);
  dlock::RedisBackend redis(ctx.get_executor(), dlock::bench::server_target().url);
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::unique_ptr<L>> locks;
  for (std::size_t i = 0; i < n; ++i)
    locks.push_back(std::make_unique<L>(redis, "bench:many:" + L::combination_name() + ":" + std::to_string(i)));
  std::vector<typename L::hold_type> holds(n);
  dlock::error_code error;
  auto t0 = bench_clock::now();
  for (auto _ : state) {
    std::size_t done = 0;
    for (std::size_t i = 0; i < n; ++i) {
      locks[i]->async_acquire("bench", [&, i](dlock::error_code ec, typename L::hold_type h) {
        if (ec) {
          error = ec;
          ++done;
          return;
        }
        holds[i] = std::move(h);
        holds[i].async_release([&](dlock::error_code e) {
          if (e) error = e;
          ++done;
        });
      });
    }
    while (done < n) ctx.run_one();
    if (error) {
      state.SkipWithError(error.message().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  dlock::bench::report_ping(state, seconds_since(t0) / static_cast<double>(state.iterations() * state.range(0)));
}

void summary(dlock::bench::ratio_reporter& r) {
  double ping = r.seconds_per_op("BM_ping_plain_socket");
  std::printf("\nin PING round trips on a plain socket, each row against the PING measured just before its\n"
              "combination's benchmarks (ping/C; a machine's speed drifts over a run): an uncontended\n"
              "acquire + release through the async interface (the io_context run by the benchmark's\n"
              "thread) and through lock()/unlock(); contended: time per cycle (the hand-off) with W\n"
              "threads on one lock; many locks: the rate of %d locks over one backend as a multiple of\n"
              "one lock's.\n",
              many);
  if (ping > 0) {
    std::printf("  first PING: %.1f us\n", ping * 1e6);
    for (const char* floor : {"floor/token_commands", "floor/redis_py_commands"})
      if (double rate = r.rate(floor); rate > 0)
        std::printf("  %-26s %8s %8.2f   (the same commands on a plain socket)\n", floor, "", 1.0 / rate / ping);
  }
  std::printf("  %-26s %8s %8s %8s %8s %8s %11s %8s\n", "combination", "async", "blocking", "W=2", "W=8", "W=32",
              "many/one", "PING us");
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    const auto name = L::combination_name();
    double row_ping = r.seconds_per_op("ping/" + name);
    if (row_ping <= 0) row_ping = ping;
    auto ratio = [&](const std::string& bench) {
      double rate = r.rate(bench);
      return rate > 0 && row_ping > 0 ? 1.0 / rate / row_ping : 0.0;
    };
    double one = r.rate("many_locks/" + name + "/1"), lots = r.rate("many_locks/" + name + "/" + std::to_string(many));
    if (ratio("lock_unlock/" + name) == 0 && ratio("lock_unlock_blocking/" + name) == 0 && one == 0 &&
        ratio("contended/" + name + "/threads:2") == 0)
      return;  // filtered out
    std::printf("  %-26s %8.2f %8.2f %8.2f %8.2f %8.2f %11.1f %8.1f\n", name.c_str(), ratio("lock_unlock/" + name),
                ratio("lock_unlock_blocking/" + name), ratio("contended/" + name + "/threads:2"),
                ratio("contended/" + name + "/threads:8"), ratio("contended/" + name + "/threads:32"),
                one > 0 ? lots / one : 0.0, row_ping * 1e6);
  });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  dlock::bench::choose_server(argc, argv);  // takes the URL, if any, out of argv
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RegisterBenchmark("BM_ping_plain_socket", dlock::bench::ping_plain_socket)->MinTime(0.5)->UseRealTime();
  benchmark::RegisterBenchmark("floor/token_commands", floor_token_cycle, true)->MinTime(0.3)->UseRealTime();
  benchmark::RegisterBenchmark("floor/redis_py_commands", floor_token_cycle, false)->MinTime(0.3)->UseRealTime();
  dlock::combinations::for_each([](auto type) {
    using L = typename decltype(type)::type;
    const auto name = L::combination_name();
    benchmark::RegisterBenchmark(("ping/" + name).c_str(), dlock::bench::ping_plain_socket)->MinTime(0.2)->UseRealTime();
    benchmark::RegisterBenchmark(("lock_unlock/" + name).c_str(), lock_unlock<L>)->MinTime(0.3)->UseRealTime();
    benchmark::RegisterBenchmark(("lock_unlock_blocking/" + name).c_str(), lock_unlock_blocking<L>)
        ->MinTime(0.3)->UseRealTime();
    benchmark::RegisterBenchmark(("contended/" + name).c_str(), contended<L>)
        ->Threads(2)->Threads(8)->Threads(32)->MinTime(0.3)->UseRealTime();
    benchmark::RegisterBenchmark(("many_locks/" + name).c_str(), many_locks<L>)
        ->Arg(1)->Arg(many)->MinTime(0.3)->UseRealTime();
  });
  dlock::bench::ratio_reporter reporter(summary);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
