// ownership::Queue's per-hold state: a waiting hold's place in the lock's
// line of waiters.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// What a waiting hold keeps beside its record (hold_state): its place in
/// the lock's line of waiters. wait::HandOff's waiter sets how it joins;
/// Queue's scripts fill in where it stands.
struct queue_place {
  bool join = false;    ///< the next try joins the line if it fails (set by the waiter)
  bool joined = false;  ///< a try that joins was sent: the entry may exist
  milliseconds entry_ttl{0};  ///< the entry lives this long unless refreshed (set by the waiter)
  /// How often the entry is refreshed while it waits (set by the waiter;
  /// the refreshes are batched per backend: ext::queue_refresher).
  milliseconds refresh{0};
  /// No grant to this hold can have happened before this moment: the
  /// send time of the last try whose reply said "queued" (or of the first
  /// try that joined). A grant's lease is counted from here.
  ext::steady::time_point since{};
  /// Its stay in the line, from the last "queued" reply: a grant message
  /// counts only if it names this stay (0: none).
  std::int64_t place = 0;
  /// The stays offered so far: each try that joins offers the next one, so
  /// a token's stays never repeat.
  std::int64_t stays = 0;
  /// Whether the first attempt of the release left while the hold was
  /// still safe to trust (a retry reads a vanished key by it).
  bool first_release_in_lease = false;

  /// A batched refresh, sent at `sent`, found this hold's token waiting
  /// in the line: a grant to it came later. Thread-safe (the refresher
  /// runs on the backend's I/O thread); never moves the bound back.
  void note_queued(ext::steady::time_point sent) noexcept {
    auto t = sent.time_since_epoch().count();
    auto known = queued_ns_.load(std::memory_order_relaxed);
    while (t > known && !queued_ns_.compare_exchange_weak(known, t, std::memory_order_release)) {
    }
  }

  /// No grant to this hold can have happened before this moment: the
  /// later of `since` (its own tries) and the last note_queued().
  ext::steady::time_point queued_since() const noexcept {
    auto noted = queued_ns_.load(std::memory_order_acquire);
    return std::max(since, ext::steady::time_point(ext::steady::duration(noted)));
  }

  /// Out of the line (the lock was won): nothing of this stay counts.
  void reset() noexcept {
    join = joined = false;
    since = {};
    place = 0;
    queued_ns_.store(INT64_MIN, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::int64_t> queued_ns_{INT64_MIN};  // steady_clock ns: see note_queued
};

}  // namespace dlock::ownership
