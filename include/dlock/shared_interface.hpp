// The shared interface of a Lock whose ownership shares (ownership::ReadWrite):
// std SharedTimedLockable, shared handles and async shared acquires. Lock
// derives from it; for other ownerships it is empty.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <dlock/detail/deadline.hpp>

namespace dlock {

/// What Lock<B, O, R, W> adds when O shares (`O::shares`, see
/// ownership::ReadWrite): shared holds beside the exclusive ones of lock()
/// and acquire(). A shared hold is keyed apart from the exclusive hold of
/// the same owner (a thread, an async owner id): each has its own count,
/// and each is released by its own call (unlock_shared, or its Hold). The
/// errors are those of the exclusive calls. Empty when `Shares` is false.
template <class L, bool Shares>
class SharedInterface {};

/// The shared interface itself, for an ownership that shares (see above).
template <class L>
class SharedInterface<L, true> {
 public:
  // ---- std SharedTimedLockable: owned by the calling thread --------------

  /// Takes the lock shared, waiting as long as it takes (std::shared_lock
  /// calls it). Throws as Lock::lock().
  void lock_shared() { self().shared_lock_until(detail::steady::time_point::max(), "lock_shared"); }

  /// One shared try: false when a writer holds (or waits for) the lock.
  bool try_lock_shared() { return self().shared_lock_until(detail::steady::now(), "try_lock_shared"); }

  /// Waits at most `d` for a shared hold.
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return self().shared_lock_until(detail::deadline_after(d), "try_lock_shared");
  }

  /// Waits until `t` on any clock for a shared hold.
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_lock_shared_for(t - Clock::now());
  }

  /// Releases one shared hold of the calling thread. Never throws: a
  /// failure goes to the error handler (as Lock::unlock()).
  void unlock_shared() noexcept { self().shared_unlock(); }

  /// As unlock_shared(), reporting what Lock::unlock(ec) reports.
  void unlock_shared(std::error_code& ec) { ec = self().shared_unlock_code(); }

  // ---- handles: owned by the calling thread ------------------------------

  /// Waits for a shared hold and returns it. Throws as Lock::acquire().
  auto acquire_shared() { return self().shared_acquire_until(detail::steady::time_point::max(), true).value(); }

  /// One shared try: an empty optional when it is held exclusively (or a
  /// writer waits); throws on anything else.
  auto try_acquire_shared() { return self().shared_acquire_until(detail::steady::now(), false); }

  /// Waits at most `d` for a shared hold; as try_acquire_shared().
  template <class Rep, class Period>
  auto try_acquire_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return self().shared_acquire_until(detail::deadline_after(d), false);
  }

  // ---- async: owned by an explicit owner id -------------------------------

  /// As Lock::async_acquire, for a shared hold of `owner_id`.
  template <class CompletionToken>
  auto async_acquire_shared(std::string owner_id, CompletionToken&& token) {
    return self().async_acquire_until_steady(std::move(owner_id), detail::steady::time_point::max(),
                                             std::forward<CompletionToken>(token), true);
  }

  /// As Lock::async_try_acquire_for, for a shared hold of `owner_id`.
  template <class Rep, class Period, class CompletionToken>
  auto async_try_acquire_shared_for(std::string owner_id, const std::chrono::duration<Rep, Period>& d,
                                    CompletionToken&& token) {
    return self().async_acquire_until_steady(std::move(owner_id), detail::deadline_after(d),
                                             std::forward<CompletionToken>(token), true);
  }

  /// The shared hold count of the calling thread.
  int held_shared_by_this_thread() const { return cself().shared_held(L::thread_owner(), false); }
  /// The shared hold count of the async owner `owner_id`.
  int held_shared_by(const std::string& owner_id) const { return cself().shared_held(owner_id, true); }

 private:
  L& self() { return static_cast<L&>(*this); }
  const L& cself() const { return static_cast<const L&>(*this); }
};

}  // namespace dlock
