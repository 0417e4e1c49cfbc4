// The client layer's cost, as ratios taken in one run against one private
// redis-server: a PING through the connection against a PING on a plain
// blocking socket, and 64 pipelining coroutines against one.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/backend/redis.hpp>
#include "bench_support.hpp"

namespace asio = boost::asio;
using dlock::redis::request;

namespace {

std::string server_url;

// The blocking form from another thread, as blocking code calls it: on a
// pooled blocking connection that the calling thread writes and reads.
void BM_ping_blocking(benchmark::State& state) {
  dlock::RedisBackend redis(server_url);
  for (auto _ : state) benchmark::DoNotOptimize(redis.command(request().push("PING")));
  state.SetItemsProcessed(state.iterations());
}

// What blocking calls cost before they had their own connections: the hop to
// the backend's I/O thread and back (a future waited on), kept as the
// yardstick for BM_ping_blocking.
void BM_ping_via_io_thread(benchmark::State& state) {
  dlock::RedisBackend redis(server_url);
  for (auto _ : state) benchmark::DoNotOptimize(redis.async_command(request().push("PING"), asio::use_future).get());
  state.SetItemsProcessed(state.iterations());
}

// N coroutines, each doing `rounds` PINGs one after another, over one
// connection: pipelining should multiply the aggregate rate.
void BM_ping_coroutines(benchmark::State& state) {
  const int coroutines = static_cast<int>(state.range(0));
  constexpr int rounds = 50;
  asio::io_context ctx(1);
  dlock::RedisBackend redis(ctx.get_executor(), server_url);
  for (auto _ : state) {
    int failures = 0, running = coroutines;
    for (int c = 0; c < coroutines; ++c) {
      asio::co_spawn(ctx, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < rounds; ++i) {
          auto [ec, r] = co_await redis.async_exec(request().push("PING"), asio::as_tuple(asio::use_awaitable));
          if (ec) ++failures;
        }
        --running;
      }, asio::detached);
    }
    // The backend's own loops never finish, so run until ours have.
    while (running > 0) ctx.run_one();
    if (failures) {
      state.SkipWithError("a PING failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * coroutines * rounds);
}

BENCHMARK(dlock::bench::ping_plain_socket)->Name("BM_ping_plain_socket")->MinTime(1.0)->UseRealTime();
BENCHMARK(dlock::bench::ping_round_trip)->Name("BM_ping_connection")->MinTime(1.0)->UseRealTime();
BENCHMARK(BM_ping_blocking)->MinTime(1.0)->UseRealTime();
BENCHMARK(BM_ping_via_io_thread)->MinTime(1.0)->UseRealTime();
BENCHMARK(BM_ping_coroutines)->Arg(1)->Arg(64)->MinTime(1.0)->UseRealTime();

}  // namespace

// Prints the ratios the library is judged by, from the numbers of this run.
static void summary(dlock::bench::ratio_reporter& r) {
  // Real time per operation (every benchmark here uses real time).
  auto per_op = [&](const char* name) { return r.seconds_per_op(name); };
  auto rate = [&](const char* name) { return r.rate(name); };
  std::printf("\nratios from this run:\n");
  if (per_op("BM_ping_plain_socket") > 0) {
    std::printf("  PING through the connection costs %.3fx a plain socket PING (aim: <= 1.10)\n",
                per_op("BM_ping_connection") / per_op("BM_ping_plain_socket"));
    std::printf("  blocking PING costs %.3fx a plain socket PING (aim: <= 1.15)\n",
                per_op("BM_ping_blocking") / per_op("BM_ping_plain_socket"));
    std::printf("  a PING waited for through the I/O thread costs %.3fx a plain socket PING\n",
                per_op("BM_ping_via_io_thread") / per_op("BM_ping_plain_socket"));
  }
  if (rate("BM_ping_coroutines/1") > 0)
    std::printf("  64 coroutines reach %.2fx the rate of one (aim: >= 5)\n",
                rate("BM_ping_coroutines/64") / rate("BM_ping_coroutines/1"));
}

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  dlock::bench::choose_server(argc, argv);  // takes the URL, if any, out of argv
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  server_url = dlock::bench::server_target().url;
  dlock::bench::ratio_reporter reporter(summary);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
