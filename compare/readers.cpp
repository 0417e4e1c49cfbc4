#include "readers.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include <dlock/dlock.hpp>

#include "report.hpp"
#include "report_format.hpp"

namespace dlock::compare {

namespace {

using Shared = Lock<RedisBackend, ownership::ReadWrite, renewal::Watchdog, wait::Spin>;
using Exclusive = Lock<RedisBackend, ownership::Token, renewal::Watchdog, wait::Spin>;
const wait::Spin quick{std::chrono::milliseconds(1)};

// A writer asks for `name` while four readers keep it shared, each taking
// it again as soon as it lets go (staggered, so that one always holds): its
// wait in ms, or nullopt when it gave up at the deadline.
std::optional<double> writer_behind_readers(const std::string& url, const std::string& name, bool intent,
                                            std::chrono::milliseconds hold, std::chrono::milliseconds deadline) {
  ownership::ReadWrite rw;
  rw.writer_intent = intent;
  std::atomic<bool> stop{false};
  std::vector<std::thread> stream;
  constexpr int readers = 4;
  for (int i = 0; i < readers; ++i) {
    stream.emplace_back([&, i] {
      RedisBackend backend(url);
      Shared lock(backend, name, rw, renewal::Watchdog{}, quick);
      std::this_thread::sleep_for(hold * i / readers);
      while (!stop) {
        if (auto h = lock.try_acquire_shared_for(deadline)) std::this_thread::sleep_for(hold);
      }
    });
  }
  std::this_thread::sleep_for(hold * 2);
  RedisBackend backend(url);
  Shared writer(backend, name, rw, renewal::Watchdog{}, quick);
  const auto t0 = test::monotonic_ns();
  auto h = writer.try_acquire_for(deadline);
  const double waited = static_cast<double>(test::monotonic_ns() - t0) / 1e6;
  if (h) h->release();
  stop = true;
  for (auto& t : stream) t.join();
  if (!h) return std::nullopt;
  return waited;
}

}  // namespace

readers_result run_readers(RedisBackend& info, const std::string& url, const std::string& prefix, int workers,
                           std::chrono::milliseconds duration, int pairs) {
  readers_result r;
  r.workers = workers;
  r.work = std::chrono::milliseconds(1);
  r.shared_combination = Shared::combination_name() + " (shared)";
  r.exclusive_combination = Exclusive::combination_name();
  r.stream_hold = std::chrono::milliseconds(20);
  r.writer_deadline = std::chrono::milliseconds(1000);
  for (int pair = 0; pair < pairs; ++pair) {
    const auto tag = ":" + std::to_string(pair);
    auto shared = [&] {
      r.shared = run_workers(
          info, url, workers, r.work, duration,
          [&](RedisBackend& b) { return std::make_unique<Shared>(b, prefix + "readers:shared" + tag, ownership::ReadWrite{}, renewal::Watchdog{}, quick); },
          [](Shared& lock, std::chrono::milliseconds left) { return lock.try_acquire_shared_for(left); });
    };
    auto exclusive = [&] {
      r.exclusive = run_workers(
          info, url, workers, r.work, duration,
          [&](RedisBackend& b) { return std::make_unique<Exclusive>(b, prefix + "readers:exclusive" + tag, ownership::Token{}, renewal::Watchdog{}, quick); },
          [](Exclusive& lock, std::chrono::milliseconds left) { return lock.try_acquire_for(left); });
    };
    if (pair % 2 == 0) shared(), exclusive();
    else exclusive(), shared();
    if (r.exclusive.per_s > 0) r.rate_pairs.push_back(r.shared.per_s / r.exclusive.per_s);
    // The writer behind a stream of readers, with and without its intent.
    for (int k = 0; k < 2; ++k) {
      const bool intent = (pair + k) % 2 == 0;
      auto waited = writer_behind_readers(url, prefix + "readers:writer" + tag + (intent ? ":intent" : ":plain"),
                                          intent, r.stream_hold, r.writer_deadline);
      auto& waits = intent ? r.wait_with_intent_ms : r.wait_without_intent_ms;
      waits.push_back(waited.value_or(static_cast<double>(r.writer_deadline.count())));
      if (!waited) ++(intent ? r.gave_up_with : r.gave_up_without);
    }
  }
  return r;
}

std::string readers_table(const readers_result& r) {
  using namespace format;
  std::string out = "\nreaders: " + std::to_string(r.workers) + " workers, each hold " + std::to_string(r.work.count()) +
                    " ms of work:\n";
  out += "  lock                               acquisitions/s  most at once  commands/acq\n";
  auto row = [&](const std::string& name, const worker_run& w) {
    out += "  " + padded(name, 35) + padded(fmt("%.0f", w.per_s), 16) + padded(std::to_string(w.most_at_once), 14) +
           fmt("%.1f", w.commands_per_acquisition) + (w.errors ? " (" + std::to_string(w.errors) + " errors)" : "") +
           "\n";
  };
  row(r.shared_combination, r.shared);
  row(r.exclusive_combination, r.exclusive);
  out += "  shared over exclusive: " + fmt("%.2f", median(r.rate_pairs)) + "x the acquisitions (median of " +
         std::to_string(r.rate_pairs.size()) + " alternating pairs)\n";
  out += "  a writer behind 4 readers taking turns (each holds " + std::to_string(r.stream_hold.count()) +
         " ms; the writer waits at most " + std::to_string(r.writer_deadline.count()) + " ms):\n";
  out += "    with its intent:    " + fmt("%.0f", median(r.wait_with_intent_ms)) + " ms (median; gave up " +
         std::to_string(r.gave_up_with) + " of " + std::to_string(r.wait_with_intent_ms.size()) + ")\n";
  out += "    without (Redisson): " + fmt("%.0f", median(r.wait_without_intent_ms)) + " ms (median; gave up " +
         std::to_string(r.gave_up_without) + " of " + std::to_string(r.wait_without_intent_ms.size()) + ")\n";
  return out;
}

std::string readers_json(const readers_result& r) {
  using namespace format;
  auto side = [](const std::string& name, const worker_run& w) {
    return "{\"combination\": " + quoted(name) + ", \"acquisitions\": " + std::to_string(w.acquisitions) +
           ", \"per_s\": " + number(w.per_s) + ", \"most_at_once\": " + std::to_string(w.most_at_once) +
           ", \"commands_per_acquisition\": " + number(w.commands_per_acquisition) +
           ", \"errors\": " + std::to_string(w.errors) + "}";
  };
  return "{\"workers\": " + std::to_string(r.workers) + ", \"work_ms\": " + std::to_string(r.work.count()) +
         ", \"shared\": " + side(r.shared_combination, r.shared) + ", \"exclusive\": " +
         side(r.exclusive_combination, r.exclusive) + ", \"rate_pairs\": " + number_list(r.rate_pairs) +
         ", \"shared_vs_exclusive\": " + number(median(r.rate_pairs)) +
         ",\n    \"writer\": {\"stream_hold_ms\": " + std::to_string(r.stream_hold.count()) +
         ", \"deadline_ms\": " + std::to_string(r.writer_deadline.count()) +
         ", \"with_intent_ms\": " + number_list(r.wait_with_intent_ms) +
         ", \"without_intent_ms\": " + number_list(r.wait_without_intent_ms) +
         ", \"gave_up_with\": " + std::to_string(r.gave_up_with) +
         ", \"gave_up_without\": " + std::to_string(r.gave_up_without) + "}}";
}

}  // namespace dlock::compare
