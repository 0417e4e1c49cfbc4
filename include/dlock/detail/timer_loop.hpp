// The clock of a per-backend service (the watchdog's renewals, the loss
// signal's deadlines): one entry per hold, one strand, one timer, and one
// step run whenever it is due.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/detail/hold_record.hpp>

namespace dlock::detail {

namespace asio = boost::asio;

/// Whether two weak pointers were made from the same shared_ptr (a reply
/// is about the record it was sent for, not a newer one at its address).
template <class T>
bool same_owner(const std::weak_ptr<T>& a, const std::weak_ptr<T>& b) noexcept {
  return !a.owner_before(b) && !b.owner_before(a);
}

/// Keeps one `Entry` per hold (under `m`) and runs `step()` on a strand of
/// the backend's executor when started, when the time it last returned
/// comes, soon after a `put()` due earlier than that, and after `wake()`. A service derives from
/// this; it is always owned by a shared_ptr (the loop and replies in flight
/// keep it alive), and its owner calls `stop()` when it goes away.
template <class Entry>
class timer_loop : public std::enable_shared_from_this<timer_loop<Entry>> {
 public:
  explicit timer_loop(const asio::any_io_executor& ex) : strand_(asio::make_strand(ex)), timer_(strand_) {}
  virtual ~timer_loop() = default;
  timer_loop(const timer_loop&) = delete;
  timer_loop& operator=(const timer_loop&) = delete;

  void start() { asio::co_spawn(strand_, run(this->shared_from_this()), asio::detached); }

  /// Runs the step soon (something became due earlier than it said).
  void wake() {
    asio::post(strand_, [self = this->shared_from_this()] { self->timer_.cancel(); });
  }

  /// Keeps `entry` for `rec` (replacing an earlier one), which is due at
  /// `due`. Wakes the loop only when the timer would fire too late for it:
  /// a lock taken and released over and over (each hold due later than the
  /// last) costs the I/O thread no wake-up per hold, just one timer expiry
  /// per period that finds the newest entry and sets the timer again.
  ///
  /// The timer it wakes is set no later than `due` even if the entry is
  /// removed before the loop steps (a watchdog's hold is taken off before
  /// its release is sent, so the step usually runs after that): otherwise
  /// the step, finding nothing, would disarm the timer and the next hold's
  /// put() would wake the loop again, once per hold. The timer then fires
  /// once at `due` for nothing.
  void put(const hold_record* rec, Entry entry, std::chrono::steady_clock::time_point due) {
    bool late = false;
    {
      std::lock_guard g(m);
      entries[rec] = std::move(entry);
      late = !armed_ || due < *armed_;
      if (late && (!woken_for_ || due < *woken_for_)) woken_for_ = due;
    }
    if (late) wake();
  }
  /// Drops `rec`'s entry: after this returns the step never sees it.
  void remove(const hold_record* rec) {
    std::lock_guard g(m);
    entries.erase(rec);
  }
  std::size_t size() const {
    std::lock_guard g(m);
    return entries.size();
  }
  /// How many times the step has run (for tests: a busy loop of holds must
  /// not run it once per hold).
  std::size_t steps() const noexcept { return steps_.load(std::memory_order_relaxed); }

  /// Ends the loop: after this returns, the step never runs again and
  /// `stopped` is true for code that runs later (replies in flight).
  void stop() {
    {
      std::lock_guard g(m);
      stopped = true;
      entries.clear();
    }
    wake();
  }

 protected:
  /// Does what is due; returns when it is next due (time_point::max():
  /// only when woken). Called on the strand, with `m` not held.
  virtual std::chrono::steady_clock::time_point step() = 0;

  mutable std::mutex m;
  bool stopped = false;                         // under m
  std::map<const hold_record*, Entry> entries;  // under m

  // For entries that keep a `next_due` (call with `m` held): the earliest
  // of them (max() when there is none), and whether one is due at `now`.
  std::chrono::steady_clock::time_point earliest_due() const {
    auto next = std::chrono::steady_clock::time_point::max();
    for (auto& [k, e] : entries) next = std::min(next, e.next_due);
    return next;
  }
  bool any_due(std::chrono::steady_clock::time_point now) const {
    for (auto& [k, e] : entries)
      if (e.next_due <= now) return true;
    return false;
  }

 private:
  static asio::awaitable<void> run(std::shared_ptr<timer_loop> self) {
    for (;;) {
      {
        std::lock_guard g(self->m);
        if (self->stopped) co_return;
      }
      {
        // While the step runs, a put() cannot know when the timer will
        // fire: it wakes the loop, which then steps again.
        std::lock_guard g(self->m);
        self->armed_.reset();
      }
      auto next = self->step();
      self->steps_.fetch_add(1, std::memory_order_relaxed);
      {
        std::lock_guard g(self->m);
        if (self->woken_for_) next = std::min(next, *self->woken_for_);
        self->woken_for_.reset();
        self->armed_ = next;
      }
      self->timer_.expires_at(next);
      co_await self->timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer timer_;
  std::optional<std::chrono::steady_clock::time_point> armed_;  // under m: when the timer fires; unset while stepping
  std::optional<std::chrono::steady_clock::time_point> woken_for_;
  std::atomic<std::size_t> steps_{0};  // under m: the earliest due a put() woke the loop for
};

}  // namespace dlock::detail
