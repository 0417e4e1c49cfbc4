#include "contention.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
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

}  // namespace

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

}  // namespace dlock::compare
