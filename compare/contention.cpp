#include "contention.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace dlock::compare {

namespace {

std::optional<std::int64_t> integer(std::string_view w) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  if (ec != std::errc() || p != w.data() + w.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    auto sp = line.find(' ');
    if (sp != 0) out.push_back(line.substr(0, sp));
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  return out;
}

// The commands the server has run so far (in all, and by name), and its
// CPU time.
struct server_totals {
  std::int64_t commands = 0;
  std::map<std::string, std::int64_t> by_name;
  double cpu_us = 0;
};
server_totals totals_of(RedisBackend& redis) {
  auto text = redis.command(redis::request().push("INFO", "cpu", "commandstats")).str;
  server_totals t{total_calls(text), {}, (info_number(text, "used_cpu_user") + info_number(text, "used_cpu_sys")) * 1e6};
  // "cmdstat_<name>:calls=<n>,..."
  for (auto at = text.find("cmdstat_"); at != std::string::npos; at = text.find("cmdstat_", at + 8)) {
    auto colon = text.find(":calls=", at);
    if (colon == std::string::npos) break;
    t.by_name[text.substr(at + 8, colon - at - 8)] = std::stoll(text.substr(colon + 7));
  }
  return t;
}

}  // namespace

double info_number(const std::string& text, const std::string& field) {
  auto at = text.find(field + ":");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + field.size() + 1));
}

std::int64_t total_calls(const std::string& text) {
  std::int64_t total = 0;
  // "cmdstat_get:calls=12,usec=...,rejected_calls=0,failed_calls=0": only
  // the first "calls=" of each line, which ":" precedes.
  for (std::size_t at = text.find(":calls="); at != std::string::npos; at = text.find(":calls=", at + 7))
    total += std::stoll(text.substr(at + 7));
  return total;
}

contention_result contend(RedisBackend& redis, const std::string& name, const std::string& lock,
                          const std::string& counter, int workers, run_times times, const launch_fn& launch,
                          double ping_us) {
  redis.command(redis::request().push("SET", counter, 0));
  auto before = totals_of(redis);
  auto start = test::monotonic_ns() + std::chrono::nanoseconds(times.start_delay).count();
  auto duration = std::chrono::nanoseconds(times.duration).count();
  std::vector<std::unique_ptr<test::child_process>> children;
  for (int p = 0; p < 2; ++p) children.push_back(launch(p, workers / 2 + (p < workers % 2 ? 1 : 0), start, duration));
  std::vector<cycle> cycles;
  test::hold_history history;
  std::vector<std::string> errors;
  for (auto& c : children) {
    bool complete = false;
    auto out = c->read_rest(times.duration + times.start_delay + std::chrono::seconds(120), complete);
    if (!complete) throw std::runtime_error(name + ": a worker process did not finish");
    if (int rc = c->wait(); rc != 0) errors.push_back("worker process exited with " + std::to_string(rc));
    auto e = collect(out, lock, cycles, history);
    errors.insert(errors.end(), e.begin(), e.end());
  }
  auto after = totals_of(redis);
  auto v = redis.command(redis::request().push("GET", counter));
  std::optional<timeline> strip;
  if (workers == 8 && !cycles.empty()) {
    // Every worker's lane, those that never got the lock too (the names
    // run_workers gives: p<process>.<thread>).
    std::vector<std::string> names;
    for (int p = 0; p < 2; ++p)
      for (int t = 0; t < workers / 2 + (p < workers % 2 ? 1 : 0); ++t)
        names.push_back("p" + std::to_string(p) + "." + std::to_string(t));
    strip = strip_of(cycles, names);
  }
  auto r = summarize(workers, duration, std::move(cycles), history, v.is_null() ? 0 : std::stoll(v.str), ping_us);
  r.strip = std::move(strip);
  r.errors = errors.size();
  for (std::size_t i = 0; i < errors.size() && i < 3; ++i) std::fprintf(stderr, "  %s: %s\n", name.c_str(), errors[i].c_str());
  // The INFO that took `before` counts in `after`; the critical section is two commands.
  if (r.cycles) {
    const auto n = static_cast<double>(r.cycles);
    r.commands_per_acquisition =
        static_cast<double>(after.commands - before.commands - 1 - 2 * static_cast<std::int64_t>(r.cycles)) / n;
    r.server_cpu_us_per_acquisition = (after.cpu_us - before.cpu_us) / n;
    for (auto& [command, calls] : after.by_name) {
      auto was = before.by_name.find(command);
      auto ran = calls - (was == before.by_name.end() ? 0 : was->second) - (command == "info" ? 1 : 0);
      if (ran > 0) r.commands_by_name[command] = static_cast<double>(ran) / n;
    }
  }
  return r;
}

std::vector<std::string> collect(const std::string& output, const std::string& lock, std::vector<cycle>& cycles,
                                 test::hold_history& history) {
  std::vector<std::string> errors;
  std::string_view text = output;
  while (!text.empty()) {
    auto eol = text.find('\n');
    auto line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    auto w = words(line);
    if (w.size() == 5 && w[0] == "cycle") {
      auto a = integer(w[2]), s = integer(w[3]), r = integer(w[4]);
      if (a && s && r) {
        cycles.push_back(cycle{std::string(w[1]), *a, *s, *r});
        history.add(test::hold_span{lock, std::string(w[1]), *a, *s});
        continue;
      }
    }
    if (!line.empty()) errors.emplace_back(line);
  }
  return errors;
}

contention_result summarize(int workers, std::int64_t duration_ns, std::vector<cycle> cycles,
                            const test::hold_history& history, std::int64_t counter, double /*ping_us*/) {
  contention_result c;
  c.workers = workers;
  c.cycles = cycles.size();
  c.seconds = static_cast<double>(duration_ns) / 1e9;
  c.cycles_per_s = c.seconds > 0 ? static_cast<double>(c.cycles) / c.seconds : 0;
  std::sort(cycles.begin(), cycles.end(), [](const cycle& a, const cycle& b) { return a.acquired < b.acquired; });
  std::vector<double> handoffs;
  for (std::size_t i = 1; i < cycles.size(); ++i) {
    // A hand-off is to another worker: a worker that takes the lock straight
    // back hands nothing off (it is counted in the fairness figures).
    if (cycles[i].worker == cycles[i - 1].worker) continue;
    auto gap = cycles[i].acquired - cycles[i - 1].released;
    handoffs.push_back(static_cast<double>(std::max<std::int64_t>(gap, 0)) / 1e3);
  }
  c.handoffs_per_s = c.seconds > 0 ? static_cast<double>(handoffs.size()) / c.seconds : 0;
  c.handoff = percentiles(handoffs);
  std::map<std::string, std::size_t> per_worker;
  for (auto& cy : cycles) ++per_worker[cy.worker];
  c.most = 0;
  c.fewest = per_worker.size() < static_cast<std::size_t>(workers) ? 0 : SIZE_MAX;
  for (auto& [w, n] : per_worker) {
    c.most = std::max(c.most, n);
    c.fewest = std::min(c.fewest, n);
  }
  if (c.fewest == SIZE_MAX) c.fewest = 0;
  c.overlaps = history.overlaps().size();
  c.lost_updates = static_cast<long long>(c.cycles) - counter;
  return c;
}

timeline strip_of(std::vector<cycle> cycles, const std::vector<std::string>& workers) {
  std::sort(cycles.begin(), cycles.end(), [](const cycle& a, const cycle& b) { return a.acquired < b.acquired; });
  // Up to 60 holds from the middle of the run (cycles are in acquire
  // order), and no more than a second of it: enough to see who gets the
  // lock and the gaps between holds, few enough to see each bar.
  const std::size_t from = cycles.size() > 60 ? cycles.size() / 2 - 30 : 0;
  const auto t0 = cycles[from].acquired;
  timeline strip("contention", std::to_string(workers.size()) + " workers on one lock", t0);
  for (auto& name : workers) strip.add_lane(name);
  std::size_t shown = 0;
  std::int64_t end = t0;
  for (std::size_t i = from; i < cycles.size() && shown < 60 && cycles[i].acquired - t0 < 1'000'000'000; ++i, ++shown) {
    strip.hold(cycles[i].worker, cycles[i].acquired, cycles[i].release_sent);
    end = std::max(end, cycles[i].release_sent);
  }
  char words[320];
  std::snprintf(words, sizeof words,
                "%.1f ms from the middle of the run: %zu holds. A bar is a hold, from its acquire's answer to its "
                "release's send; the white between two bars, the time from one release to the next acquire.",
                static_cast<double>(end - t0) / 1e6, shown);
  strip.say(words);
  return strip;
}

}  // namespace dlock::compare
