// Redlock's restart story on three private redis-servers (no persistence),
// for examples/redlock_node_restart.cpp and tests/lock/test_redlock.cpp:
//
//   node 2 is down when client A locks, so A wins on nodes 0 and 1: a bare
//   majority. Node 2 comes back, empty. Then node 1 crashes and, after
//   `out_for`, comes back, empty too: it has forgotten A's key. Client B
//   now asks: node 0 says "held", nodes 1 and 2 say "free", a majority.
//
// With an immediate restart, B wins while A still holds (its lease has
// not run out): two holders, which the hold-history checker reports. With
// a delayed restart (out longer than the longest lease), A's hold has ended
// before node 1 can vote again: B wins alone.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dlock/backend/redlock.hpp>
#include <dlock/dlock.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include <support/redis_server.hpp>

namespace dlock::examples::redlock_story {

using Lock = dlock::Lock<RedlockBackend, ownership::Token, renewal::FixedLease, wait::TryOnce>;

/// What one run of the story found.
struct outcome {
  bool a_held = false;    ///< A won its bare majority
  bool b_held = false;    ///< B won while node 1 was back
  bool overlap = false;   ///< the checker found A's and B's holds overlapping
  long long b_after_ms = 0;  ///< from node 1's crash to B's lock
  /// When each thing happened (CLOCK_MONOTONIC ns; 0: it did not), for
  /// dlock-compare's timeline of the story.
  struct stamps {
    std::int64_t start = 0, node2_down = 0, a_start = 0, a_end = 0, node2_back = 0, node1_crash = 0,
                 node1_back = 0, b_start = 0, b_end = 0;
  } at;  ///< see stamps
};

/// Three servers and two clients, each with its own backend.
class stage {
 public:
  /// Three servers started with `opts` (no persistence unless its
  /// extra_args turn some on: `--appendonly yes --appendfsync always`).
  explicit stage(std::chrono::milliseconds lease, dlock::test::server_options opts = {}) : lease_(lease) {
    for (int i = 0; i < 3; ++i) servers_.push_back(std::make_unique<dlock::test::redis_server>(opts));
  }

  /// Plays the story once, node 1 staying out `out_for`.
  outcome play(std::chrono::milliseconds out_for) {
    using namespace std::chrono_literals;
    outcome out;
    for (auto& s : servers_) s->command({"FLUSHALL"});
    RedlockBackend a_side(settings()), b_side(settings());
    Lock a(a_side, "story", {}, renewal::FixedLease(lease_));
    Lock b(b_side, "story", {}, renewal::FixedLease(lease_));
    out.at.start = out.at.node2_down = dlock::test::monotonic_ns();
    servers_[2]->kill();
    wait_node(a_side, 2, false);
    auto a_hold = a.try_acquire();
    out.a_held = a_hold.has_value();
    if (!a_hold) return out;
    // A's critical section lasts until its release, or until its loss
    // signal says the lease could be over, or its own deadline passes
    // (remaining_lease(): the signal's callback can run later on a loaded
    // machine): a careful holder stops there.
    const auto a_start = out.at.a_start = dlock::test::monotonic_ns();
    const auto a_deadline = a_start + std::chrono::nanoseconds(a_hold->remaining_lease()).count();
    auto lost_at = std::make_shared<std::atomic<std::int64_t>>(0);
    a_hold->on_lost([lost_at] { lost_at->store(dlock::test::monotonic_ns()); });
    servers_[2]->start();
    out.at.node2_back = out.at.node1_crash = dlock::test::monotonic_ns();
    servers_[1]->kill();
    const auto crash = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(out_for);
    out.at.node1_back = dlock::test::monotonic_ns();
    servers_[1]->start();
    wait_node(b_side, 1, true);
    wait_node(b_side, 2, true);
    std::optional<Lock::hold_type> b_hold;
    for (auto until = std::chrono::steady_clock::now() + lease_ * 2; !b_hold && std::chrono::steady_clock::now() < until;)
      if (!(b_hold = b.try_acquire())) std::this_thread::sleep_for(10ms);
    out.b_held = b_hold.has_value();
    if (b_hold) {
      const auto b_start = out.at.b_start = dlock::test::monotonic_ns();
      out.b_after_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - crash).count();
      std::this_thread::sleep_for(lease_ / 4);  // B's work
      dlock::test::hold_history history;
      auto lost = lost_at->load();
      out.at.a_end = std::min(lost ? lost : dlock::test::monotonic_ns(), a_deadline);
      out.at.b_end = dlock::test::monotonic_ns();
      history.add({"story", "A", a_start, out.at.a_end});
      history.add({"story", "B", b_start, out.at.b_end});
      out.overlap = !history.overlaps().empty();
    }
    std::error_code ignored;
    a_hold->release(ignored);
    if (b_hold) b_hold->release(ignored);
    return out;
  }

 private:
  redis::redlock_config settings() const {
    using namespace std::chrono_literals;
    redis::redlock_config cfg;
    for (auto& s : servers_) cfg.nodes.push_back(redis::parse_url(s->url()));
    cfg.reply_timeout = dlock::test::scaled(300ms);
    for (auto& n : cfg.nodes) {
      n.connect_timeout = dlock::test::scaled(500ms);
      n.reconnect_wait_max = 200ms;
    }
    return cfg;
  }
  static void wait_node(RedlockBackend& b, std::size_t i, bool up) {
    if (!dlock::test::wait_until([&] { return b.node_available(i) == up; }))
      throw std::runtime_error("node " + b.node_name(i) + " did not go " + (up ? "up" : "down"));
  }

  std::chrono::milliseconds lease_;
  std::vector<std::unique_ptr<dlock::test::redis_server>> servers_;
};

}  // namespace dlock::examples::redlock_story
