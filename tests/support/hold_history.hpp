// The hold-history checker: critical sections recorded as (lock, worker,
// start, end, shared) on CLOCK_MONOTONIC, which every process on one machine
// shares, and a check that no exclusive hold of a lock overlaps another hold
// of it (shared holds, a read-write lock's readers, may overlap each other).
// Used by dlock-compare's safety phase and by fault tests; plain standard
// library, no Redis.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlock::test {

/// Now on CLOCK_MONOTONIC, in nanoseconds: comparable across processes of
/// one machine (steady_clock is not guaranteed to be).
std::int64_t monotonic_ns();

/// One critical section: `worker` held `lock` from `start_ns` (after its
/// acquire was answered) to `end_ns` (before its release was sent).
struct hold_span {
  std::string lock;
  std::string worker;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  /// A shared hold (a reader's): it may overlap other shared holds.
  bool shared = false;

  /// One line, "hold <lock> <worker> <start> <end>" and " shared" for a
  /// shared hold: what a worker process prints for the checker to collect.
  /// Names must not contain spaces.
  std::string format() const;
  /// The span a format() line describes; nullopt for anything else
  /// (another line of a worker's output, a truncated line).
  static std::optional<hold_span> parse(std::string_view line);
};

/// Two holds of one lock that overlap in time, at least one of them
/// exclusive: `earlier` began first and had not ended when `later` began.
struct overlap {
  hold_span earlier, later;
  std::int64_t overlap_ns() const;
};

/// A history of holds from any number of threads and processes.
class hold_history {
 public:
  hold_history() = default;
  /// Takes `other`'s spans (other may not be in use meanwhile).
  hold_history(hold_history&& other) noexcept : spans_(std::move(other.spans_)) {}
  /// Thread-safe.
  void add(hold_span span);
  /// Adds every line of `text` that parses as a span; returns how many.
  std::size_t add_lines(std::string_view text);

  std::vector<hold_span> spans() const;
  std::size_t size() const;

  /// Every hold that began while an earlier hold of the same lock that it
  /// may not overlap had not ended (an exclusive hold overlaps any; a
  /// shared hold only an exclusive one), paired with the earlier hold of
  /// that kind that ended last. A hold that begins exactly when the
  /// previous one ends does not overlap. Empty when the history is safe.
  std::vector<overlap> overlaps() const;

  /// The most holds of `lock` that were held at one moment (a hold that
  /// ends as another begins is not counted with it).
  std::size_t most_at_once(std::string_view lock) const;

 private:
  mutable std::mutex m_;
  std::vector<hold_span> spans_;
};

}  // namespace dlock::test
