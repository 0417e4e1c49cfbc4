// The benchmarks' shared server, PING baseline and ratio reporter.
#include "bench_support.hpp"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <system_error>
#include <vector>

namespace dlock::bench {

target& server_target() {
  static target t;
  return t;
}

void choose_server(int& argc, char** argv) {
  auto& t = server_target();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.rfind("redis://", 0) != 0 && arg.rfind("unix://", 0) != 0) continue;
    t.url = arg;
    for (int k = i; k + 1 < argc; ++k) argv[k] = argv[k + 1];
    --argc;
    break;
  }
  if (t.url.empty()) {
    t.server = std::make_unique<test::redis_server>();
    t.url = t.server->url();
  }
}

double ping_us() {
  static const double measured = [] {
    boost::asio::io_context ctx(1);
    RedisBackend redis(ctx.get_executor(), server_target().url);
    std::vector<double> samples;
    for (int i = 0; i < 2000; ++i) {
      bool done = false;
      redis::error_code error;
      auto t0 = std::chrono::steady_clock::now();
      redis.async_exec(redis::request().push("PING"), [&](redis::error_code ec, redis::response) {
        error = ec;
        done = true;
      });
      while (!done) ctx.run_one();
      if (error) throw std::system_error(error, "PING");
      samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
  }();
  return measured;
}

void report_ping(benchmark::State& state, double seconds_per_op) {
  state.counters["ping_us"] = ping_us();
  if (seconds_per_op > 0) state.counters["in_pings"] = seconds_per_op * 1e6 / ping_us();
}

void ping_round_trip(benchmark::State& state) {
  boost::asio::io_context ctx(1);
  RedisBackend redis(ctx.get_executor(), server_target().url);
  for (auto _ : state) {
    bool done = false;
    redis::error_code error;
    redis.async_exec(redis::request().push("PING"), [&](redis::error_code ec, redis::response) {
      error = ec;
      done = true;
    });
    while (!done) ctx.run_one();
    if (error) {
      state.SkipWithError(error.message().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void ratio_reporter::ReportRuns(const std::vector<Run>& runs) {
  ConsoleReporter::ReportRuns(runs);
  for (const auto& r : runs) {
    if (r.run_type != Run::RT_Iteration || r.error_occurred || r.iterations == 0) continue;
    // "contended/x/min_time:0.300/real_time/threads:8" -> "contended/x/threads:8"
    std::string name;
    for (std::size_t at = 0, end; at <= r.benchmark_name().size(); at = end + 1) {
      end = r.benchmark_name().find('/', at);
      if (end == std::string::npos) end = r.benchmark_name().size();
      auto part = r.benchmark_name().substr(at, end - at);
      if (part.rfind("min_time:", 0) == 0 || part == "real_time") continue;
      name += (name.empty() ? "" : "/") + part;
    }
    seconds_[name] = r.real_accumulated_time / static_cast<double>(r.iterations);
    auto it = r.counters.find("items_per_second");
    if (it != r.counters.end()) rate_[name] = it->second.value;
  }
}

void ratio_reporter::Finalize() {
  ConsoleReporter::Finalize();
  if (summary_) summary_(*this);
}

double ratio_reporter::seconds_per_op(const std::string& name) const {
  auto it = seconds_.find(name);
  return it == seconds_.end() ? 0 : it->second;
}

double ratio_reporter::rate(const std::string& name) const {
  auto it = rate_.find(name);
  return it == rate_.end() ? 0 : it->second;
}

}  // namespace dlock::bench
