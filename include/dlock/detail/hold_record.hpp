// What dlock knows locally about one hold of a lock: its key, its owner, its
// lease, its reentrant depth, until when it is known to be valid, and whether
// it is lost.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/redis/acknowledged.hpp>

namespace dlock::detail {

using steady = std::chrono::steady_clock;

struct hold_record {
  std::string name;   ///< the lock's key
  std::string owner;  ///< what proves ownership in Redis: token, hash field, or value
  std::chrono::milliseconds lease{0};  ///< 0: the key never expires
  /// How long before the lease could end, as this process measures it, the
  /// hold counts as lost (see renewal::loss_margin).
  std::chrono::milliseconds margin{0};
  /// Names the release being sent (and its retries after outcome_unknown)
  /// so that the release script can answer a retry without acting twice.
  /// Set by the lock inside the owner's gate, right before the release.
  std::string release_id;
  /// Whether the release named `release_id` is a retry of one sent before
  /// (after outcome_unknown or a connection error); set by the lock with
  /// `release_id`. Only a retry can find a release's marker, so a first
  /// attempt need not read one.
  bool release_retry = false;
  /// Names the acquire try being sent, so that an ownership that remembers
  /// its wins (ReentrantHash) can tell whether a lost reply was a win.
  std::string attempt_id;
  int hold_count = 0;  ///< reentrant depth held by this process (lock's mutex)
  /// A shared hold (a reader of an ownership that shares, ReadWrite): set
  /// by the lock when it makes the record, from the owner's key.
  bool shared = false;
  /// Whether the acquire waits after this try if it fails (its deadline is
  /// later than the try): set by the lock before each try. ReadWrite's
  /// writer leaves its intent only then.
  bool may_wait = false;
  /// What the replicas acknowledged of the last acquire try's write (see
  /// detail::acknowledged_exec); reset by the lock before each try. A try
  /// that sent no WAIT leaves `sent` false.
  redis::replica_acks acks;
  /// The hold's fencing token (see dlock::fencing_tokens), when fencing is
  /// on: set by the acquire that won, before the hold is handed out, and
  /// not changed after.
  std::optional<std::uint64_t> fence;
  /// The server's own words behind the last server_error an ownership
  /// operation on this hold returned (an ACL refusal, a script's error), for
  /// the lock's error message. Written by the ownership (detail::note,
  /// detail::refused), cleared and read by the lock inside the owner's gate
  /// (or, for a record no holder shares any more, by the work that ends it).
  std::string server_reply;

  /// Records that a command which set the lease to `lease`, sent at `sent`,
  /// was confirmed by the server: the key cannot expire before sent + lease
  /// (the server received it no earlier than it was sent). Never moves the
  /// validity backwards, and never revives a hold already found lost: its
  /// holder has been told to stop trusting it. Returns false in that case.
  bool confirm(steady::time_point sent) noexcept {
    std::lock_guard g(m_);
    if (lost_.load(std::memory_order_relaxed)) return false;
    if (lease <= std::chrono::milliseconds::zero()) return true;  // never expires
    auto until = (sent + lease).time_since_epoch().count();
    auto known = valid_until_ns_.load(std::memory_order_relaxed);
    if (known == INT64_MAX || until > known) valid_until_ns_.store(until, std::memory_order_release);
    return true;
  }

  /// Until when the server cannot have expired the key: the send time of
  /// the last confirmed acquire or renewal plus the lease; max() when the
  /// key never expires.
  steady::time_point valid_until() const noexcept {
    auto until = valid_until_ns_.load(std::memory_order_acquire);
    return until == INT64_MAX ? steady::time_point::max() : steady::time_point(steady::duration(until));
  }

  /// When the hold counts as lost unless a renewal is confirmed first:
  /// valid_until() - margin; max() when the key never expires.
  steady::time_point loss_deadline() const noexcept {
    auto until = valid_until();
    return until == steady::time_point::max() ? until : until - margin;
  }

  /// How long the hold is still safe to trust: until loss_deadline(); zero
  /// once that has passed or the hold is lost; max() without expiry.
  std::chrono::milliseconds remaining() const noexcept {
    if (lost()) return std::chrono::milliseconds(0);
    auto deadline = loss_deadline();
    if (deadline == steady::time_point::max()) return std::chrono::milliseconds::max();
    auto left = deadline - steady::now();
    if (left <= steady::duration::zero()) return std::chrono::milliseconds(0);
    return std::chrono::duration_cast<std::chrono::milliseconds>(left);
  }

  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }

  /// Marks the hold lost if its loss deadline has passed at `now` (and no
  /// confirmation moved it first); returns whether it did.
  bool expire_if_due(steady::time_point now) {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard g(m_);
      if (lost_.load(std::memory_order_relaxed) || now < loss_deadline()) return false;
      lost_.store(true, std::memory_order_release);
      callbacks.swap(on_lost_);
    }
    signal(callbacks);
    return true;
  }

  /// Marks the hold lost and signals it, once.
  void mark_lost() {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard g(m_);
      if (lost_.exchange(true)) return;
      callbacks.swap(on_lost_);
    }
    signal(callbacks);
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

  /// Stop is requested on it when the hold is found lost.
  std::stop_token stop_token() const noexcept { return stop_.get_token(); }

 private:
  void signal(const std::vector<std::function<void()>>& callbacks) {
    stop_.request_stop();  // runs the holder's std::stop_callbacks here
    for (auto& cb : callbacks) run(cb);
  }

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

  std::atomic<std::int64_t> valid_until_ns_{INT64_MAX};  // steady_clock ns (written under m_)
  std::atomic<bool> lost_{false};
  std::mutex m_;
  std::vector<std::function<void()>> on_lost_;
  std::stop_source stop_;
};

/// How the lock keys a shared hold: this, then the owner's key (a thread's
/// number or "async:" + an owner id), so shared and exclusive holds of one
/// owner are counted apart and never collide.
inline constexpr std::string_view shared_key_prefix = "shared:";

/// What marks the words that explain an error as dlock's own rather than
/// the server's (a quorum naming the nodes that did not answer): see
/// own_words.
inline constexpr std::string_view own_words_prefix = "dlock: ";

/// `text` as the words that go with an error (a record's server_reply) when
/// they are dlock's own: with_server_reply gives them in parentheses, not as
/// what Redis replied, and words_for keeps them with any error.
inline std::string own_words(std::string_view text) {
  std::string out(own_words_prefix);
  out += text;
  return out;
}

/// `what`, followed by the server's words behind a server_error when it gave
/// some (at most 512 bytes of them, never cutting a UTF-8 character in
/// two): what a thrown error or a lock's error handler is told.
inline std::string with_server_reply(std::string what, const std::string& server_reply) {
  if (server_reply.empty()) return what;
  if (server_reply.starts_with(own_words_prefix)) {
    what += " (";
    what.append(server_reply, own_words_prefix.size());
    what += ')';
    return what;
  }
  std::size_t keep = server_reply.size();
  if (keep > 512) {
    keep = 512;  // back to the start of the character the cut would split
    while (keep > 0 && (static_cast<unsigned char>(server_reply[keep]) & 0xC0) == 0x80) --keep;
  }
  what += " (Redis replied: ";
  what.append(server_reply, 0, keep);
  what += ')';
  return what;
}

/// A hold record with an ownership's own per-hold state beside the shared
/// part (ownership::Queue's place in the line; a fencing token or a
/// quorum's per-node results would go here too). The host makes one for an
/// ownership that names its state as `hold_state`; engines that serve every
/// ownership see only the hold_record base.
template <class State>
struct hold_record_with : hold_record {
  State state;
};

/// The record the host makes for ownership `O`: hold_record_with its
/// `O::hold_state`, or the plain hold_record.
template <class O>
struct record_for {
  using type = hold_record;
};
template <class O>
  requires requires { typename O::hold_state; }
struct record_for<O> {
  using type = hold_record_with<typename O::hold_state>;
};
template <class O>
using record_t = typename record_for<O>::type;

}  // namespace dlock::detail
