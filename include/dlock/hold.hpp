// Hold: a move-only guard for one acquisition of a lock. It releases on
// destruction, tells how long its lease is still good, and reports loss.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>

#include <dlock/detail/hold_record.hpp>
#include <dlock/redis/error_code.hpp>

namespace dlock {

/// One acquisition of a `Lock`, owned by this object. The lock object must
/// outlive its holds (as a mutex outlives a std::unique_lock).
///
/// Destruction releases it. A hold from the blocking interface waits for
/// the reply; a hold from the async interface, or one destroyed on a thread
/// that runs the backend's executor, sends the release and returns (waiting
/// there would stop the very thread that must read the reply). A release
/// that fails in a destructor cannot throw: it goes to the lock's error
/// handler (see `Lock::set_error_handler`; by default one line on stderr),
/// renewal stops, and the lock lapses when its lease ends.
template <class LockType>
class Hold {
 public:
  Hold() = default;
  /// Takes over `other`'s hold; `other` is left empty.
  Hold(Hold&& other) noexcept
      : lock_(std::exchange(other.lock_, nullptr)),
        owner_key_(std::move(other.owner_key_)),
        async_(other.async_),
        record_(std::move(other.record_)),
        release_id_(std::move(other.release_id_)) {}
  /// Releases this hold first, if it has one, as the destructor does (a
  /// failure goes to the lock's error handler), then takes over `other`'s;
  /// `other` is left empty.
  Hold& operator=(Hold&& other) noexcept {
    if (this != &other) {
      abandon();
      lock_ = std::exchange(other.lock_, nullptr);
      owner_key_ = std::move(other.owner_key_);
      async_ = other.async_;
      record_ = std::move(other.record_);
      release_id_ = std::move(other.release_id_);
    }
    return *this;
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold() { abandon(); }

  /// True until released (or moved from).
  explicit operator bool() const noexcept { return record_ != nullptr; }
  /// As operator bool (std::unique_lock's name for it).
  bool owns_lock() const noexcept { return record_ != nullptr; }

  /// How long the hold is still safe to trust: until its loss deadline
  /// (the send time of the last confirmed acquire or renewal, plus the
  /// lease, minus the renewal policy's safety margin); zero once that has
  /// passed or the hold is lost; max() for a lock without expiry
  /// (renewal::None).
  std::chrono::milliseconds remaining_lease() const noexcept {
    if (!record_) return std::chrono::milliseconds(0);
    return record_->remaining();
  }

  /// True once the hold is lost: its loss deadline passed with no renewal
  /// confirmed, or a renewal or release found the key gone or someone
  /// else's. Someone else may hold the lock now. A lost hold stays lost,
  /// even if a late renewal is confirmed afterwards.
  bool lost() const noexcept { return record_ && record_->lost(); }

  /// The hold's fencing token, when its ownership hands them out (see
  /// dlock::fencing_tokens): a number that is higher than that of every
  /// earlier hold of this lock. Give it to the resource with each write;
  /// the resource refuses a write whose token is lower than one it has
  /// seen. Empty when fencing is off (or the hold is released).
  std::optional<std::uint64_t> fencing_token() const noexcept {
    return record_ ? record_->fence : std::nullopt;
  }

  /// Runs `callback` once when the hold is lost (at once if it already is).
  /// A timer fires it at the loss deadline (see remaining_lease()) unless a
  /// renewal was confirmed first; it does not wait for a stalled renewal
  /// to time out. As long as the clocks' drift and this process's lateness
  /// stay within the safety margin, that is before the server can have
  /// expired the key, and so before another client can acquire it. It runs
  /// on the backend's I/O thread: it must not block; typically it cancels
  /// the work the lock protects.
  void on_lost(std::function<void()> callback) {
    if (record_) record_->on_lost(std::move(callback));
  }

  /// The same signal as a std::stop_token: stop is requested when the hold
  /// is lost. Poll `stop_requested()` in the critical section, or attach a
  /// std::stop_callback (it runs on the backend's I/O thread, or at once if
  /// the hold is already lost). An empty hold gives a token that never
  /// stops. The token stays valid after the hold is released or destroyed.
  std::stop_token stop_token() const noexcept { return record_ ? record_->stop_token() : std::stop_token(); }

  /// Releases now. Throws std::system_error: lease_lost (the lock had
  /// expired or was taken: the protected work may have overlapped another
  /// holder's), outcome_unknown (the release was sent and not answered: the
  /// hold stays releasable, and calling release() again never acts twice:
  /// Token and Queue resolve it from the key, ReentrantHash answers it from
  /// a marker within its `release_memory.window`, while SetNx and the
  /// expiry-value ownerships, having no owner check, send their DEL again),
  /// or a connection error (not sent; still held, still releasable).
  /// A refusal's message quotes the server (see error::server_error).
  void release() {
    std::error_code ec;
    std::string server_reply;
    release(ec, &server_reply);
    if (ec) throw std::system_error(ec, detail::with_server_reply("release of lock '" + lock_name() + "'", server_reply));
  }

  /// As release(), reporting through `ec`.
  void release(std::error_code& ec) { release(ec, nullptr); }

  /// Releases asynchronously. Completion signature: `void(error_code)`, as
  /// release(); an empty hold completes with not_owner. The hold must stay
  /// alive until completion. Cancellation: ignored, as by
  /// Lock::async_release (the release runs to its end and completes with
  /// its own outcome).
  template <class CompletionToken>
  auto async_release(CompletionToken&& token) {
    return LockType::initiate_release(lock_, *this, std::forward<CompletionToken>(token));
  }

  /// The owner: the id given to the async interface, or the thread number
  /// of the std and handle interfaces.
  std::string owner_id() const { return LockType::owner_id_of(owner_key_, async_); }

 private:
  template <class, class, class, class>
  friend class Lock;

  // `server_reply`, when given, receives the server's words behind a
  // server_error.
  void release(std::error_code& ec, std::string* server_reply) {
    ec.clear();
    if (!record_) {
      ec = make_error_code(error::not_owner);
      return;
    }
    ec = lock_->release_hold_blocking(*this, server_reply);
  }

  Hold(LockType* lock, std::string owner_key, bool async, std::shared_ptr<detail::hold_record> rec)
      : lock_(lock), owner_key_(std::move(owner_key)), async_(async), record_(std::move(rec)) {}

  std::string lock_name() const { return record_ ? record_->name : std::string(); }

  // After outcome_unknown or a connection error the lock may still be held:
  // keep the hold so that the caller can retry.
  static bool keep_after(const std::error_code& ec) {
    return ec && ec != error::lease_lost && ec != error::not_owner;
  }

  void forget() noexcept {
    record_.reset();
    lock_ = nullptr;
  }

  // Destruction or move-assignment: release, and nobody can retry it.
  void abandon() noexcept {
    if (!record_) return;
    lock_->release_abandoned(std::move(owner_key_), async_, std::move(record_), std::move(release_id_));
    lock_ = nullptr;
  }

  LockType* lock_ = nullptr;
  std::string owner_key_;  // the owner as the lock keys it (see Lock::owner_key)
  bool async_ = false;     // from the async interface
  std::shared_ptr<detail::hold_record> record_;
  std::string release_id_;  // a release that may be retried (after outcome_unknown)
};

}  // namespace dlock
