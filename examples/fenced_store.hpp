// A resource that a lock protects, and that protects itself: it remembers
// the highest fencing token it has accepted and refuses a write that
// carries a lower one (Hold::fencing_token(), dlock::fencing_tokens). A
// holder that lost its lock without knowing (stopped past its lease, or cut
// off by a failover) comes back with an older token, and its late write is
// refused instead of overwriting the newer holder's work.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

namespace dlock::examples {

class fenced_store {
 public:
  /// Stores `value` if `token` is at least the highest token accepted so
  /// far (the same holder may write several times); returns whether it did.
  bool write(std::uint64_t token, std::string value) {
    std::lock_guard g(mutex_);
    if (token < highest_) return false;
    highest_ = token;
    value_ = std::move(value);
    return true;
  }

  std::string value() const {
    std::lock_guard g(mutex_);
    return value_;
  }
  std::uint64_t highest_token() const {
    std::lock_guard g(mutex_);
    return highest_;
  }

 private:
  mutable std::mutex mutex_;
  std::uint64_t highest_ = 0;
  std::string value_;
};

}  // namespace dlock::examples
