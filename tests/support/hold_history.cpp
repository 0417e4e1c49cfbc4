#include "support/hold_history.hpp"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <map>

namespace dlock::test {

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string hold_span::format() const {
  return "hold " + lock + " " + worker + " " + std::to_string(start_ns) + " " + std::to_string(end_ns) +
         (shared ? " shared" : "");
}

namespace {

// The next space-separated word of `line`, consumed; empty at the end.
std::string_view word(std::string_view& line) {
  auto start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  auto end = line.find(' ');
  auto w = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return w;
}

std::optional<std::int64_t> integer(std::string_view w) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  if (ec != std::errc() || p != w.data() + w.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<hold_span> hold_span::parse(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (word(line) != "hold") return std::nullopt;
  hold_span s;
  s.lock = std::string(word(line));
  s.worker = std::string(word(line));
  auto start = integer(word(line)), end = integer(word(line));
  auto kind = word(line);
  s.shared = kind == "shared";
  if (s.lock.empty() || s.worker.empty() || !start || !end || *end < *start || (!kind.empty() && !s.shared) ||
      !word(line).empty())
    return std::nullopt;
  s.start_ns = *start;
  s.end_ns = *end;
  return s;
}

std::int64_t overlap::overlap_ns() const { return std::min(earlier.end_ns, later.end_ns) - later.start_ns; }

void hold_history::add(hold_span span) {
  std::lock_guard g(m_);
  spans_.push_back(std::move(span));
}

std::size_t hold_history::add_lines(std::string_view text) {
  std::size_t added = 0;
  while (!text.empty()) {
    auto eol = text.find('\n');
    auto line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (auto s = hold_span::parse(line)) {
      add(std::move(*s));
      ++added;
    }
  }
  return added;
}

std::vector<hold_span> hold_history::spans() const {
  std::lock_guard g(m_);
  return spans_;
}

std::size_t hold_history::size() const {
  std::lock_guard g(m_);
  return spans_.size();
}

std::vector<overlap> hold_history::overlaps() const {
  std::map<std::string, std::vector<hold_span>> by_lock;
  for (auto& s : spans()) by_lock[s.lock].push_back(s);
  std::vector<overlap> found;
  for (auto& [lock, spans] : by_lock) {
    std::sort(spans.begin(), spans.end(), [](const hold_span& a, const hold_span& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
    });
    // Sweep in start order, keeping the hold that ends last so far, and
    // the exclusive one that ends last: an exclusive hold that starts
    // before the first of those ends overlaps it, a shared one the second.
    const hold_span* latest = nullptr;
    const hold_span* latest_exclusive = nullptr;
    for (auto& s : spans) {
      const hold_span* against = s.shared ? latest_exclusive : latest;
      if (against && s.start_ns < against->end_ns) found.push_back(overlap{*against, s});
      if (!latest || s.end_ns > latest->end_ns) latest = &s;
      if (!s.shared && (!latest_exclusive || s.end_ns > latest_exclusive->end_ns)) latest_exclusive = &s;
    }
  }
  return found;
}

std::size_t hold_history::most_at_once(std::string_view lock) const {
  // Starts and ends in time order; at one moment, ends first (a hold that
  // ends as another begins is not counted with it), then starts, then the
  // ends of holds of no length (counted with the holds that begin then).
  enum order { end = 0, start = 1, end_of_empty = 2 };
  std::vector<std::pair<std::int64_t, order>> events;
  for (auto& s : spans())
    if (s.lock == lock) {
      events.emplace_back(s.start_ns, start);
      events.emplace_back(s.end_ns, s.end_ns == s.start_ns ? end_of_empty : end);
    }
  std::sort(events.begin(), events.end());
  long long most = 0, now = 0;
  for (auto& [at, what] : events) {
    now += what == start ? 1 : -1;
    most = std::max(most, now);
  }
  return static_cast<std::size_t>(most);
}

}  // namespace dlock::test
