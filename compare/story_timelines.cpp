#include "story_timelines.hpp"

#include <string>

#include "report_format.hpp"

namespace dlock::compare {

using format::fmt_ms;

namespace {

double ms_between(std::int64_t from_ns, std::int64_t to_ns) { return static_cast<double>(to_ns - from_ns) / 1e6; }

}  // namespace

timeline failover_timeline(examples::failover_story::act which, const examples::failover_story::outcome& o) {
  using examples::failover_story::act;
  const char* story = which == act::reproduced ? "failover" : which == act::prevented ? "failover_acknowledged"
                                                                                    : "failover_fenced";
  const char* title = which == act::reproduced ? "Seed 003's failover: the master dies before its replicas have A's key"
                      : which == act::prevented ? "The same failover, with replica acknowledgement (WAIT, the default)"
                                                : "The same failover, with fencing tokens";
  timeline t(story, title, o.at.start);
  t.add_lane("A");
  t.add_lane("B");
  if (o.a_held) t.hold("A", o.at.a_answered, o.at.a_end ? o.at.a_end : o.at.b_end);
  else t.event("A", o.at.a_answered, "refused", "acquire refused");
  t.story_event(o.at.kill, "failover", "master killed");
  if (o.at.promoted) t.story_event(o.at.promoted, "failover", "replica promoted");
  if (o.b_held) {
    t.hold("B", o.at.b_start, o.at.b_end);
    t.event("B", o.at.b_write, "write", "B writes");
  }
  if (o.at.a_late_write)
    t.event("A", o.at.a_late_write, o.late_write_refused ? "refused" : "write",
            o.late_write_refused ? "late write refused" : "A's late write lands");
  const std::string after = o.b_held ? fmt_ms(static_cast<double>(o.failover_ms)) : std::string("?");
  std::string s;
  if (which == act::prevented) {
    s = o.a_held ? "A's acquire was counted although no replica had its key: the acknowledgement did not hold. "
                 : "Replication to both replicas was held back, so no replica acknowledged A's write within the "
                   "timeout: A's acquire was refused and its key taken back. ";
    s += "Then the master was killed, and Sentinel promoted a replica; B locked on it " + after +
         " after the kill, the only holder.";
  } else {
    s = "A locked on the master while replication to both replicas was held back, so no replica had its key. The "
        "master was killed and Sentinel promoted a replica that never had it; B locked there " + after +
        " after the kill" + (o.overlap ? " while A, whose lease had not run out, still held: two holders. "
                                        : ", and the checker found no overlap. ");
    if (o.at.a_late_write)
      s += o.late_write_refused ? (which == act::fenced ? "A's late write carried a lower fencing token than B's, "
                                                          "and the store refused it."
                                                        : "The store refused A's late write.")
                                : "Nothing told A; its late write landed on top of B's.";
  }
  t.say(s);
  return t;
}

timeline restart_timeline(bool delayed, const examples::redlock_story::outcome& o, double lease_ms, double out_ms) {
  timeline t(delayed ? "restart_delayed" : "restart", delayed ? "A Redlock node restarted after a delay"
                                                              : "A Redlock node restarted at once, empty",
             o.at.start);
  t.add_lane("A");
  t.add_lane("B");
  t.story_event(o.at.node2_down, "kill", "node 2 down");
  if (o.a_held && o.at.a_end) {
    t.hold("A", o.at.a_start, o.at.a_end);
    if (ms_between(o.at.a_start, o.at.a_end) >= lease_ms * 0.9) t.event("A", o.at.a_end, "lost", "loss signal");
  }
  if (o.at.node1_crash) {
    t.story_event(o.at.node1_crash, "restart", "node 2 back, node 1 crashed");
    t.story_event(o.at.node1_back, "restart", "node 1 back, empty");
  }
  if (o.b_held) t.hold("B", o.at.b_start, o.at.b_end);
  std::string s = "Three nodes without persistence, lease " + fmt_ms(lease_ms) +
                  ". Node 2 was down when A locked, so A won on nodes 0 and 1, a bare majority. Node 2 came back "
                  "empty and node 1 crashed; ";
  if (!delayed) {
    s += "it came back at once, empty too, having forgotten A's key. B asked: node 0 said held, nodes 1 and 2 said "
         "free, a majority. ";
    s += o.overlap ? "B locked while A's lease still ran: two holders." : "Yet the checker found no overlap.";
  } else {
    s += "it stayed out " + fmt_ms(out_ms) +
         ", longer than the lease (Redis's remedy, the delayed restart), so A's hold had ended before node 1 could "
         "vote again. ";
    s += o.overlap ? "Yet the checker found an overlap." : "B locked alone.";
  }
  t.say(s);
  return t;
}

}  // namespace dlock::compare
