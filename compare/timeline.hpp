// A fault story's timeline, for the report page (compare/report_page.py):
// one lane per client, its holds as spans and what happened to it as
// events, on CLOCK_MONOTONIC stamps (ns) taken by the processes that held,
// and the overlaps the hold-history checker found among those holds. Times
// are written as ms from the story's start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <support/hold_history.hpp>

namespace dlock::compare {

/// One story's lanes, holds, events and overlaps.
class timeline {
 public:
  /// Story `story` ("killed", "paused", ...) titled `title`, starting at
  /// `t0_ns` (CLOCK_MONOTONIC).
  timeline(std::string story, std::string title, std::int64_t t0_ns)
      : story_(std::move(story)), title_(std::move(title)), t0_ns_(t0_ns) {}

  /// `lane` held from `start_ns` (its acquire answered) to `end_ns` (its
  /// release sent). Lanes appear in the order first named.
  void hold(const std::string& lane, std::int64_t start_ns, std::int64_t end_ns);
  /// An event on `lane` at `at_ns`: kind is one of kill, stop, cont,
  /// lease_end, lost, write, refused, release, delete, skew, failover,
  /// restart (report_page.py draws each).
  void event(const std::string& lane, std::int64_t at_ns, std::string kind, std::string label);
  /// An event of the whole story (a failover, a node's crash or restart)
  /// at `at_ns`, drawn across every lane.
  void story_event(std::int64_t at_ns, std::string kind, std::string label) {
    events_.push_back(event_at{ms(at_ns), std::move(kind), std::move(label)});
  }
  /// A lane named `name`, empty until something happens on it (so that
  /// lanes keep an order of the caller's, idle ones included).
  void add_lane(const std::string& name) { lane(name); }
  /// What happened, in a sentence or two, under the drawing.
  void say(std::string sentence) { sentence_ = std::move(sentence); }

  /// The overlaps of its holds, as the hold-history checker finds them.
  std::vector<test::overlap> overlaps() const;
  /// The JSON object report_page.py reads.
  std::string json() const;

  /// An event as drawn: ms from the story's start, its kind and label.
  struct event_at {
    double at_ms;             ///< from the story's start
    std::string kind, label;  ///< see event()
  };

 private:
  struct lane_data {
    std::string name;
    std::vector<test::hold_span> holds;
    std::vector<event_at> events;
  };
  lane_data& lane(const std::string& name);
  double ms(std::int64_t ns) const { return static_cast<double>(ns - t0_ns_) / 1e6; }

  std::string story_, title_, sentence_;
  std::int64_t t0_ns_;
  std::vector<lane_data> lanes_;
  std::vector<event_at> events_;  // the whole story's
};

}  // namespace dlock::compare
