// dlock-compare's Redlock fault rows (see redlock_phase.hpp), each on
// private redis-servers of its own: nodes killed one at a time, one node
// stalled, and the restart story of examples/redlock_story.hpp.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <dlock/backend/redlock.hpp>
#include <dlock/dlock.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include <support/redis_server.hpp>

#include "../examples/redlock_story.hpp"
#include "story_timelines.hpp"
#include "measure.hpp"
#include "redlock_phase.hpp"

namespace dlock::compare {

namespace {

using namespace std::chrono_literals;
using test::scaled;

std::vector<std::unique_ptr<test::redis_server>> start_nodes(int n) {
  std::vector<std::unique_ptr<test::redis_server>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<test::redis_server>());
  return out;
}

std::string name_of(const test::redis_server& s) { return "127.0.0.1:" + std::to_string(s.port()); }

// The nodes' settings as a user would write them (the default reply
// timeout), reconnecting every 200 ms at most so that a run does not wait
// out a long backoff.
redis::redlock_config settings(const std::vector<std::unique_ptr<test::redis_server>>& nodes) {
  redis::redlock_config cfg;
  for (auto& s : nodes) {
    cfg.nodes.push_back(redis::parse_url(s->url()));
    cfg.nodes.back().reconnect_wait_max = 200ms;
  }
  return cfg;
}

// A client that locks and unlocks the default lock without pause, on a
// thread of its own, stamping each acquire; it can be held idle.
class busy_client {
 public:
  busy_client(RedlockBackend& backend, const std::string& key) : lock_(backend, key), thread_([this] { run(); }) {}
  ~busy_client() {
    {
      std::lock_guard g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // When the first acquire begun after `t` (monotonic ns) was answered,
  // waited for up to `limit`; 0 if none was.
  std::int64_t acquire_after(std::int64_t t, std::chrono::milliseconds limit) {
    std::unique_lock g(m_);
    std::int64_t found = 0;
    cv_.wait_for(g, limit, [&] {
      for (auto& [begun, answered] : stamps_)
        if (begun > t) return (found = answered), true;
      return failure_.has_value();
    });
    return found;
  }
  // Holds the client idle (between cycles) until go().
  void pause() {
    std::unique_lock g(m_);
    paused_ = paused_once_ = true;
    cv_.wait(g, [&] { return idle_ || failure_; });
  }
  // Lets it go on; returns the failure that ended it, waited for up to `limit`.
  std::system_error go_until_failure(std::chrono::milliseconds limit) {
    std::unique_lock g(m_);
    paused_ = false;
    cv_.notify_all();
    cv_.wait_for(g, limit, [&] { return failure_.has_value(); });
    return failure_.value_or(std::system_error(std::error_code(), "no failure within the limit"));
  }
  // Votes that found no majority in time while a majority lived.
  int no_quorum_retries() {
    std::lock_guard g(m_);
    return no_quorum_retries_;
  }
  // The median time between acquires so far (ms).
  double median_gap_ms() {
    std::lock_guard g(m_);
    std::vector<double> gaps;
    for (std::size_t i = 1; i < stamps_.size(); ++i)
      gaps.push_back(static_cast<double>(stamps_[i].second - stamps_[i - 1].second) / 1e6);
    return gaps.empty() ? 0 : median(gaps);
  }

 private:
  void run() {
    for (;;) {
      {
        std::unique_lock g(m_);
        if (paused_) {
          idle_ = true;
          cv_.notify_all();
          cv_.wait(g, [&] { return !paused_ || stop_; });
          idle_ = false;
        }
        if (stop_) return;
      }
      // The throwing calls: their messages name the nodes that did not
      // answer. With nodes dying, a release may be unknown: that ends the
      // run too.
      const auto begun = test::monotonic_ns();
      std::int64_t t = 0;
      try {
        // With a majority dead, the wait votes until its end (or for a
        // lease) before it reports no_quorum: kept short.
        auto hold = lock_.try_acquire_for(scaled(2s));
        if (!hold) throw std::system_error(error::not_acquired, "acquire within 2 s");
        t = test::monotonic_ns();
        hold->release();
      } catch (const std::system_error& e) {
        std::lock_guard g(m_);
        // While a majority lives, a vote that found no majority in time
        // (each node has 100 ms to answer, which a loaded machine can
        // exceed) is counted and tried again: nothing was held. Once the
        // client was paused for a majority's death, any failure ends it.
        if (!paused_once_ && e.code() == error::no_quorum) {
          ++no_quorum_retries_;
          continue;
        }
        failure_.emplace(e);
        cv_.notify_all();
        return;
      }
      std::lock_guard g(m_);
      stamps_.emplace_back(begun, t);
      cv_.notify_all();
    }
  }

  Lock<RedlockBackend> lock_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::pair<std::int64_t, std::int64_t>> stamps_;  // each acquire: begun, answered
  std::optional<std::system_error> failure_;
  bool paused_ = false, paused_once_ = false, idle_ = false, stop_ = false;
  int no_quorum_retries_ = 0;
  std::thread thread_;
};

}  // namespace

node_loss_row node_loss(int n, int runs) {
  node_loss_row row;
  row.nodes = n;
  row.runs = runs;
  const int minority = n / 2;
  row.death_to_acquire_ms.resize(static_cast<std::size_t>(minority));
  std::vector<double> gaps;
  for (int run = 0; run < runs; ++run) {
    auto nodes = start_nodes(n);
    RedlockBackend backend(settings(nodes));
    const std::string key = "loss";
    {
      busy_client client(backend, key);
      std::this_thread::sleep_for(scaled(200ms));
      gaps.push_back(client.median_gap_ms());
      for (int k = 0; k < minority; ++k) {
        const auto t = test::monotonic_ns();
        nodes[static_cast<std::size_t>(k)]->kill();
        const auto next = client.acquire_after(t, scaled(10s));
        if (next == 0) break;  // no acquire: the row shows fewer samples than runs
        row.death_to_acquire_ms[static_cast<std::size_t>(k)].push_back(static_cast<double>(next - t) / 1e6);
        std::this_thread::sleep_for(scaled(100ms));
      }
      if (int retries = client.no_quorum_retries())
        std::fprintf(stderr, "  %d nodes: %d votes found no majority in time while one lived (tried again)\n", n,
                     retries);
      // One more, with the client idle: a majority is gone.
      client.pause();
      auto& last = *nodes[static_cast<std::size_t>(minority)];
      last.kill();
      test::wait_until([&] { return !backend.node_available(static_cast<std::size_t>(minority)); });
      auto failure = client.go_until_failure(scaled(10s));
      std::string what = failure.what();
      bool named = true;
      for (int k = 0; k <= minority; ++k) named = named && what.find(name_of(*nodes[static_cast<std::size_t>(k)])) != std::string::npos;
      if (failure.code() == error::no_quorum && named) ++row.majority_lost_refused;
      else std::fprintf(stderr, "  %d nodes, a majority dead: %s\n", n, what.c_str());
    }
    bool held = false;
    for (auto& s : nodes)
      if (s->running() && s->command({"EXISTS", key}) != "0") held = true;
    row.left_held += held;
  }
  row.healthy_gap_ms = gaps.empty() ? 0 : median(gaps);
  return row;
}

stalled_row stalled_node(int n, int attempts) {
  stalled_row row;
  row.nodes = n;
  row.attempts = attempts;
  auto nodes = start_nodes(n);
  RedlockBackend backend(settings(nodes));
  row.reply_timeout_ms = static_cast<double>(backend.settings().reply_timeout.count());
  Lock<RedlockBackend> lock(backend, "stalled");
  auto votes = [&](std::vector<double>& durations, bool count) {
    for (int i = 0; i < attempts; ++i) {
      std::error_code ec;
      const auto t0 = clock::now();
      auto hold = lock.try_acquire(ec);
      durations.push_back(micros(clock::now() - t0));
      if (hold) hold->release(ec);
      if (count && hold) ++row.acquired;
      if (ec && ec != error::not_acquired) {
        if (!row.errors++) row.first_error = ec.message();
      }
    }
  };
  std::vector<double> healthy, stalled;
  votes(healthy, false);
  nodes.back()->pause();
  votes(stalled, true);
  nodes.back()->resume();
  row.healthy_acquire = percentiles(healthy);
  row.stalled_acquire = percentiles(stalled);
  return row;
}

restart_row restart_story(int runs) {
  namespace story = examples::redlock_story;
  restart_row row;
  row.runs = runs;
  const auto lease = scaled(600ms), delayed = lease + scaled(300ms);
  row.lease_ms = static_cast<double>(lease.count());
  row.delayed_ms = static_cast<double>(delayed.count());
  story::stage stage(lease);
  for (int run = 0; run < runs; ++run) {
    auto now = stage.play(0ms);
    row.at_once_overlaps += now.overlap;
    row.at_once_b_held += now.b_held;
    if (now.b_held) row.at_once_b_after_ms.push_back(static_cast<double>(now.b_after_ms));
    auto later = stage.play(delayed);
    row.delayed_overlaps += later.overlap;
    row.delayed_b_held += later.b_held;
    if (later.b_held) row.delayed_b_after_ms.push_back(static_cast<double>(later.b_after_ms));
    if (run == 0) {
      row.timelines.push_back(restart_timeline(false, now, row.lease_ms, 0));
      row.timelines.push_back(restart_timeline(true, later, row.lease_ms, row.delayed_ms));
    }
  }
  return row;
}

}  // namespace dlock::compare
