#include "timeline.hpp"

#include <algorithm>

#include "report_format.hpp"

namespace dlock::compare {

using format::number;
using format::quoted;

timeline::lane_data& timeline::lane(const std::string& name) {
  for (auto& l : lanes_)
    if (l.name == name) return l;
  lanes_.push_back(lane_data{name, {}, {}});
  return lanes_.back();
}

void timeline::hold(const std::string& lane_name, std::int64_t start_ns, std::int64_t end_ns) {
  lane(lane_name).holds.push_back(test::hold_span{story_, lane_name, start_ns, end_ns});
}

void timeline::event(const std::string& lane_name, std::int64_t at_ns, std::string kind, std::string label) {
  lane(lane_name).events.push_back(event_at{ms(at_ns), std::move(kind), std::move(label)});
}

std::vector<test::overlap> timeline::overlaps() const {
  test::hold_history history;
  for (auto& l : lanes_)
    for (auto& h : l.holds) history.add(h);
  return history.overlaps();
}

namespace {

std::string events_json(const std::vector<timeline::event_at>& events) {
  std::string out = "[";
  for (std::size_t k = 0; k < events.size(); ++k)
    out += (k ? ", " : "") + std::string("{\"at_ms\": ") + number(events[k].at_ms) +
           ", \"kind\": " + quoted(events[k].kind) + ", \"label\": " + quoted(events[k].label) + "}";
  return out + "]";
}

}  // namespace

std::string timeline::json() const {
  std::string out = "{\"story\": " + quoted(story_) + ", \"title\": " + quoted(title_) +
                    ", \"sentence\": " + quoted(sentence_) + ",\n       \"lanes\": [";
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    auto& l = lanes_[i];
    out += (i ? ", " : "") + std::string("{\"name\": ") + quoted(l.name) + ", \"holds\": [";
    for (std::size_t k = 0; k < l.holds.size(); ++k)
      out += (k ? ", " : "") + std::string("{\"start_ms\": ") + number(ms(l.holds[k].start_ns)) +
             ", \"end_ms\": " + number(ms(l.holds[k].end_ns)) + "}";
    out += "], \"events\": " + events_json(l.events) + "}";
  }
  out += "],\n       \"events\": " + events_json(events_);
  out += ",\n       \"overlaps\": [";
  auto found = overlaps();
  for (std::size_t i = 0; i < found.size(); ++i) {
    auto& o = found[i];
    const auto end = std::min(o.earlier.end_ns, o.later.end_ns);
    out += (i ? ", " : "") + std::string("{\"start_ms\": ") + number(ms(o.later.start_ns)) +
           ", \"end_ms\": " + number(ms(end)) + ", \"lanes\": [" + quoted(o.earlier.worker) + ", " +
           quoted(o.later.worker) + "]}";
  }
  return out + "]}";
}

}  // namespace dlock::compare
