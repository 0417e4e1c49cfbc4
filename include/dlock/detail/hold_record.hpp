// What dlock knows locally about one hold of a lock: its key, its owner, its
// lease, its reentrant depth, and whether renewal found it gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace dlock::detail {

using steady = std::chrono::steady_clock;

struct hold_record {
  std::string name;   ///< the lock's key
  std::string owner;  ///< what proves ownership in Redis: token, hash field, or value
  std::chrono::milliseconds lease{0};  ///< 0: the key never expires
  /// Names the release being sent (and its retries after outcome_unknown)
  /// so that the release script can answer a retry without acting twice.
  /// Set by the lock inside the owner's gate, right before the release.
  std::string release_id;
  /// Names the acquire try being sent, so that an ownership that remembers
  /// its wins (ReentrantHash) can tell whether a lost reply was a win.
  std::string attempt_id;
  int hold_count = 0;  ///< reentrant depth held by this process (lock's mutex)

  /// Until when the lease is known to be valid, as steady_clock nanoseconds;
  /// max() when the key never expires. Measured from when the command that
  /// set it was *sent*, so it errs on the safe side.
  std::atomic<std::int64_t> valid_until_ns{INT64_MAX};

  void set_valid_until(steady::time_point t) noexcept {
    valid_until_ns.store(t.time_since_epoch().count(), std::memory_order_release);
  }
  steady::time_point valid_until() const noexcept {
    auto until = valid_until_ns.load(std::memory_order_acquire);
    return until == INT64_MAX ? steady::time_point::max() : steady::time_point(steady::duration(until));
  }
  std::chrono::milliseconds remaining() const noexcept {
    auto until = valid_until_ns.load(std::memory_order_acquire);
    if (until == INT64_MAX) return std::chrono::milliseconds::max();
    auto left = steady::time_point(steady::duration(until)) - steady::now();
    if (left <= steady::duration::zero()) return std::chrono::milliseconds(0);
    return std::chrono::duration_cast<std::chrono::milliseconds>(left);
  }

  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }

  /// Marks the hold lost and runs the loss callbacks, once.
  void mark_lost() {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard g(m_);
      if (lost_.exchange(true)) return;
      callbacks.swap(on_lost_);
    }
    for (auto& cb : callbacks) run(cb);
  }

  /// Runs `cb` when the hold is found lost (at once if it already is).
  void on_lost(std::function<void()> cb) {
    {
      std::lock_guard g(m_);
      if (!lost_.load()) {
        on_lost_.push_back(std::move(cb));
        return;
      }
    }
    run(cb);
  }

 private:
  // A loss callback must not throw (it runs on the backend's thread, inside
  // renewal or release); if one does, say so rather than end the process.
  static void run(const std::function<void()>& cb) noexcept {
    try {
      cb();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dlock: a lock-loss callback threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "dlock: a lock-loss callback threw\n");
    }
  }

  std::atomic<bool> lost_{false};
  std::mutex m_;
  std::vector<std::function<void()>> on_lost_;
};

}  // namespace dlock::detail
