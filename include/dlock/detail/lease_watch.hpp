// The loss signal's clock: one timer per backend that marks a hold lost at
// the moment the server could have expired it, not when a renewal fails.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <dlock/detail/hold_record.hpp>
#include <dlock/detail/timer_loop.hpp>

namespace dlock::detail {

/// Watches every held lock with a lease and marks each one lost at its
/// loss deadline (hold_record::loss_deadline: the send time of the last
/// confirmed acquire or renewal, plus the lease, minus the safety margin)
/// unless a confirmation moved the deadline first. A stalled renewal is
/// therefore noticed when the lease could end, not when its command times
/// out seconds later, when another client may already hold the lock.
///
/// The loss callbacks and stop callbacks run on the backend's executor.
template <class B>
class lease_watch {
 public:
  explicit lease_watch(B& backend) : impl_(std::make_shared<impl>(backend.get_executor())) { impl_->start(); }
  /// Stops at once: no hold is signalled after this returns.
  ~lease_watch() { impl_->stop(); }
  lease_watch(const lease_watch&) = delete;
  lease_watch& operator=(const lease_watch&) = delete;

  /// Watches `rec` until remove() or until it is signalled lost. A record
  /// without expiry is not watched.
  void add(const std::shared_ptr<hold_record>& rec) {
    if (auto due = rec->loss_deadline(); due != steady::time_point::max()) impl_->put(rec.get(), rec, due);
  }

  /// Stops watching `rec`: after this returns it is never signalled by
  /// this watch (a signal already running completes).
  void remove(const hold_record* rec) { impl_->remove(rec); }
  std::size_t size() const { return impl_->size(); }
  /// Times its timer loop has stepped (see timer_loop::steps).
  std::size_t steps() const { return impl_->steps(); }

 private:
  struct impl final : timer_loop<std::weak_ptr<hold_record>> {
    using timer_loop::timer_loop;

    // Signals every record whose deadline has passed; returns when the next
    // one is due. A deadline moved later by a renewal only makes the timer
    // fire early and look again.
    steady::time_point step() override {
      std::vector<std::shared_ptr<hold_record>> due;
      {
        std::lock_guard g(m);
        if (stopped) return steady::time_point::max();
        auto now = steady::now();
        for (auto& [k, w] : entries)
          if (auto rec = w.lock(); rec && rec->loss_deadline() <= now) due.push_back(std::move(rec));
      }
      // Outside the mutex: callbacks may call back into the lock. A
      // confirmation racing this wins or loses under the record's own mutex
      // (expire_if_due checks the deadline again there).
      for (auto& rec : due) rec->expire_if_due(steady::now());
      std::lock_guard g(m);
      auto next = steady::time_point::max();
      for (auto it = entries.begin(); it != entries.end();) {
        auto rec = it->second.lock();
        if (!rec || rec->lost()) {
          it = entries.erase(it);
        } else {
          next = std::min(next, rec->loss_deadline());
          ++it;
        }
      }
      return next;
    }
  };

  std::shared_ptr<impl> impl_;
};

}  // namespace dlock::detail
