// Uncontended acquire + release of every valid lock combination, as a
// ratio to one PING round trip measured in the same run.
#include <cstdio>
#include <string>

#include <boost/asio/io_context.hpp>

#include <dlock/combinations.hpp>

#include "bench_support.hpp"

namespace {

namespace asio = boost::asio;

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
}

void summary(dlock::bench::ratio_reporter& r) {
  double ping = r.seconds_per_op("BM_ping_connection");
  if (ping <= 0) return;
  std::printf("\nuncontended acquire + release, in PING round trips (PING = %.1f us):\n", ping * 1e6);
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    double t = r.seconds_per_op("lock_unlock/" + L::combination_name());
    if (t > 0) std::printf("  %-26s %6.2f\n", L::combination_name().c_str(), t / ping);
  });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  dlock::bench::choose_server(argc, argv);
  benchmark::RegisterBenchmark("BM_ping_connection", dlock::bench::ping_round_trip)->MinTime(0.5)->UseRealTime();
  dlock::combinations::for_each([](auto type) {
    using L = typename decltype(type)::type;
    benchmark::RegisterBenchmark(("lock_unlock/" + L::combination_name()).c_str(), lock_unlock<L>)->MinTime(0.3)->UseRealTime();
  });
  dlock::bench::ratio_reporter reporter(summary);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
