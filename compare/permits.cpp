#include "permits.hpp"

#include <memory>

#include <dlock/dlock.hpp>

#include "report.hpp"
#include "report_format.hpp"
#include "workers.hpp"

namespace dlock::compare {

namespace {

using Permits = Lock<RedisBackend, ownership::Semaphore, renewal::Watchdog, wait::Spin>;

// One run: `workers` threads on Semaphore{permits} named `name`.
permits_side run_side(RedisBackend& info, const std::string& url, const std::string& name, int workers,
                      std::int64_t permits, std::chrono::milliseconds work, std::chrono::milliseconds duration) {
  auto run = run_workers(
      info, url, workers, work, duration,
      [&](RedisBackend& backend) {
        return std::make_unique<Permits>(backend, name, ownership::Semaphore{permits}, renewal::Watchdog{},
                                         wait::Spin{std::chrono::milliseconds(1)});
      },
      [](Permits& lock, std::chrono::milliseconds left) { return lock.try_acquire_for(left); });
  permits_side side{run};
  side.permits = permits;
  return side;
}

}  // namespace

permits_result run_permits(RedisBackend& info, const std::string& url, const std::string& prefix, int workers,
                           std::int64_t permits, std::chrono::milliseconds duration, int pairs) {
  permits_result r;
  r.combination = Permits::combination_name();
  r.workers = workers;
  r.work = std::chrono::milliseconds(1);
  r.sides.resize(2);
  for (int pair = 0; pair < pairs; ++pair) {
    auto run = [&](std::size_t i) {
      const std::int64_t n = i == 0 ? 1 : permits;
      r.sides[i] = run_side(info, url, prefix + "permits:" + std::to_string(n) + ":" + std::to_string(pair), workers,
                            n, r.work, duration);
    };
    if (pair % 2 == 0) run(0), run(1);
    else run(1), run(0);
    if (r.sides[0].per_s > 0) r.rate_pairs.push_back(r.sides[1].per_s / r.sides[0].per_s);
  }
  return r;
}

std::string permits_table(const permits_result& r) {
  using namespace format;
  std::string out = "\npermits: " + std::to_string(r.workers) + " workers on one semaphore (" + r.combination +
                    "), each hold " + std::to_string(r.work.count()) + " ms of work:\n";
  out += "  permits  acquisitions/s  most at once  commands/acq\n";
  for (auto& s : r.sides)
    out += "  " + padded(std::to_string(s.permits), 9) + padded(fmt("%.0f", s.per_s), 16) +
           padded(std::to_string(s.most_at_once), 14) + fmt("%.1f", s.commands_per_acquisition) +
           (s.errors ? " (" + std::to_string(s.errors) + " errors)" : "") + "\n";
  if (r.sides.size() == 2)
    out += "  " + std::to_string(r.sides[1].permits) + " permits over 1: " + fmt("%.2f", median(r.rate_pairs)) +
           "x the acquisitions (median of " + std::to_string(r.rate_pairs.size()) +
           " alternating pairs); commands/acq counts every try, the refused ones too\n";
  return out;
}

std::string permits_json(const permits_result& r) {
  using namespace format;
  std::string out = "{\"combination\": " + quoted(r.combination) + ", \"workers\": " + std::to_string(r.workers) +
                    ", \"work_ms\": " + std::to_string(r.work.count()) + ", \"sides\": [";
  for (std::size_t i = 0; i < r.sides.size(); ++i) {
    auto& s = r.sides[i];
    out += (i ? ", " : "") + std::string("{\"permits\": ") + std::to_string(s.permits) +
           ", \"acquisitions\": " + std::to_string(s.acquisitions) + ", \"per_s\": " + number(s.per_s) +
           ", \"most_at_once\": " + std::to_string(s.most_at_once) + ", \"commands_per_acquisition\": " +
           number(s.commands_per_acquisition) + ", \"errors\": " + std::to_string(s.errors) + "}";
  }
  return out + "], \"rate_pairs\": " + number_list(r.rate_pairs) + ", \"rate_vs_one\": " +
         number(median(r.rate_pairs)) + "}";
}

}  // namespace dlock::compare
