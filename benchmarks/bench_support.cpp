// The benchmarks' shared server, PING baseline and ratio reporter.
#include "bench_support.hpp"

namespace dlock::bench {

target& server_target() {
  static target t;
  return t;
}

void choose_server(int argc, char** argv) {
  auto& t = server_target();
  if (argc > 1) {
    t.url = argv[1];
  } else {
    t.server = std::make_unique<test::redis_server>();
    t.url = t.server->url();
  }
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
    std::string name = r.benchmark_name();
    name = name.substr(0, name.find("/min_time"));
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
