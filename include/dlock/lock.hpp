// Lock<Backend, Ownership, Renewal, Wait>: the host that composes the four
// policies into a distributed lock with std, handle and Asio interfaces.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/concepts.hpp>
#include <dlock/detail/background.hpp>
#include <dlock/detail/commands.hpp>
#include <dlock/detail/deadline.hpp>
#include <dlock/detail/op_results.hpp>
#include <dlock/detail/owner_gate.hpp>
#include <dlock/detail/policy_checks.hpp>
#include <dlock/detail/quorum.hpp>
#include <dlock/detail/random.hpp>
#include <dlock/detail/run_here.hpp>
#include <dlock/detail/spawn.hpp>
#include <dlock/detail/wait_steps.hpp>
#include <dlock/hold.hpp>
#include <dlock/shared_interface.hpp>

#include <dlock/ownership/reentrant_hash.hpp>
#include <dlock/renewal/watchdog.hpp>
#include <dlock/wait/pubsub.hpp>

namespace dlock {

class RedisBackend;  // declared only: <dlock/dlock.hpp> (or backend/redis.hpp) defines it

/// A distributed lock named `name` on `Backend`, built from three policies:
/// Ownership (who holds it, and the Redis side of acquire, release and
/// extend: ownership::SetNx, Token, ReentrantHash, GetSetExpiry,
/// NaiveExpiry, Queue, Semaphore, ReadWrite), Renewal (how long a hold
/// lasts and who extends it: renewal::None, FixedLease, Watchdog) and Wait
/// (what to do after a failed try: wait::TryOnce, Spin, Backoff, PubSub,
/// HandOff). The defaults make Redisson's RLock: a reentrant hash, a 30 s
/// watchdog renewed every 10 s, and waiters woken by pub/sub.
///
/// Interfaces:
/// - std TimedLockable (`lock`, `try_lock`, `try_lock_for`, `try_lock_until`,
///   `unlock`), owned by the calling thread, so std::unique_lock and
///   std::scoped_lock work and a reentrant ownership re-enters on the same
///   thread;
/// - handles: `acquire()`, `try_acquire()`, `try_acquire_for()` return a
///   `Hold` that releases on destruction and reports its lease and its loss;
/// - async: `async_acquire`, `async_try_acquire_for`, `async_release` with any
///   completion token, owned by an explicit owner id (a coroutine may resume
///   on another thread, so "the calling thread" means nothing there);
/// - with an ownership that shares (ReadWrite), the same three for shared
///   holds (SharedInterface): std::shared_lock works.
///
/// Blocking calls must not run on a thread that runs the backend's executor
/// (see RedisBackend::on_io_thread): lock, try_lock and acquire throw
/// std::logic_error there; unlock and Hold::release send nothing and report
/// would_deadlock (unlock() through the error handler).
/// Thread safety: a Lock may be used from many threads at once; it must
/// outlive its holds and its blocking calls (async ones: see ~Lock). Each
/// owner's acquire tries and releases take turns (a per-owner gate), so its
/// hold count in Redis and here change in the same order even when one
/// owner id is used from several coroutines or threads at once.
template <class BackendT = RedisBackend, class OwnershipT = ownership::ReentrantHash,
          class RenewalT = renewal::Watchdog, class WaitT = wait::PubSub>
class Lock : public SharedInterface<Lock<BackendT, OwnershipT, RenewalT, WaitT>, detail::shares<OwnershipT>()> {
  // What a quorum backend cannot do: first, else the adapter's checks below fail first.
  static_assert(detail::quorum_checks<BackendT, OwnershipT, RenewalT, WaitT>::ok);
  // What runs for the ownership on this backend: a quorum backend's adapter
  // around it (ownership::Quorum on RedlockBackend), or the ownership itself.
  using adapted_ownership = detail::adapted_t<BackendT, OwnershipT>;
  // Each family's contract, one operation at a time (a sentence each).
  static_assert(detail::policy_checks<BackendT, adapted_ownership, RenewalT, WaitT>::ok,
                "dlock::Lock's parameters must be a backend, an ownership, a renewal and a wait policy");
  static_assert(detail::rule_checks<OwnershipT, RenewalT, WaitT>::ok);

 public:
  using backend_type = BackendT;  ///< The backend the lock talks to Redis through.
  using ownership_type = OwnershipT;  ///< Who holds the lock: the Redis side of acquire, release and extend.
  using renewal_type = RenewalT;  ///< How long a hold lasts, and who extends it.
  using wait_type = WaitT;  ///< What an acquire does after a failed try.
  using hold_type = Hold<Lock>;  ///< The guard that the handle and async interfaces return.

  /// Checks the name and every policy parameter before anything reaches
  /// Redis: throws std::system_error with invalid_name (empty or longer than
  /// 4096 bytes), invalid_lease (zero, negative, longer than max_lease, or
  /// too short for its loss margin) or invalid_interval; invalid_argument
  /// when the ownership is not owner-checked and the backend was told to
  /// acknowledge writes (not by its default: acknowledges_every_lock()).
  Lock(BackendT& backend, std::string name, OwnershipT ownership = {}, RenewalT renewal = {},
       WaitT wait = {});

  /// Ends its async acquires in flight as a terminal cancellation would and
  /// waits until they and its async releases no longer use it: an acquire
  /// that had just won, until its handler returns (so do not destroy a lock
  /// on the thread that must run such a handler). Then releases what it
  /// holds and waits for destroyed holds' releases. On the backend's own
  /// thread it cannot wait: nothing may be in flight there; holds lapse.
  ~Lock();

  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  const std::string& name() const noexcept { return name_; }  ///< The lock's name: its key in Redis.
  BackendT& backend() noexcept { return backend_; }  ///< The backend given to the constructor.
  const OwnershipT& ownership() const noexcept { return detail::inner_ownership(ownership_); }  ///< The ownership policy, as validated by the constructor.
  const RenewalT& renewal() const noexcept { return renewal_; }  ///< The renewal policy, as validated by the constructor.
  const WaitT& wait_policy() const noexcept { return wait_; }  ///< The wait policy, as validated by the constructor.

  /// "token/watchdog/pubsub": the policies' names.
  static std::string combination_name() {
    return std::string(OwnershipT::policy_name) + "/" + RenewalT::policy_name + "/" + WaitT::policy_name;
  }

  // ---- std TimedLockable: owned by the calling thread --------------------

  /// Waits as long as it takes (with TryOnce: one try). Throws
  /// std::system_error: not_acquired (TryOnce only), already_held (this
  /// thread holds a non-reentrant lock), outcome_unknown, connection errors,
  /// server_error (quoting the server: "NOPERM ..." for an ACL refusal),
  /// no_quorum (docs/redlock.md). Error-code overloads give the code alone.
  void lock();

  /// One try. False when held by someone else; throws on other errors.
  bool try_lock() { return try_lock_until_steady(detail::steady::now()); }

  /// Waits at most `d` (a negative duration is a zero one; a huge one waits
  /// without bound).
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return try_lock_until_steady(detail::deadline_after(d));
  }

  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_lock_for(t - Clock::now());
  }  ///< Waits until `t` on any clock (measured as the time left on that clock); as try_lock_for().

  /// Releases one hold of the calling thread. Never throws (std::unique_lock
  /// calls it from a destructor): a failure goes to the error handler. Use
  /// unlock(ec) to see it.
  void unlock() noexcept;

  /// As unlock(), reporting not_owner (this thread holds nothing),
  /// lease_lost, outcome_unknown, connection errors, or would_deadlock (on
  /// a thread that runs the backend's executor; nothing was sent). After
  /// outcome_unknown, this thread's next unlock() retries that release and
  /// reports what it did, never acting twice (Token and Queue: resolved
  /// from the key; ReentrantHash: from a marker, within its
  /// `release_memory.window`).
  void unlock(std::error_code& ec) { ec = release_blocking(thread_owner(), nullptr, {}, false).ec; }

  // ---- handles: owned by the calling thread ------------------------------

  /// Waits as lock() does and returns the hold. Throws as lock().
  hold_type acquire();

  /// As acquire(), reporting every failure through `ec` (an empty optional
  /// then). Still throws std::logic_error on a thread that runs the
  /// backend's executor.
  std::optional<hold_type> acquire(std::error_code& ec) {
    return acquire_hold_blocking(detail::steady::time_point::max(), ec);
  }

  /// One try. An empty optional when the lock is held by someone else;
  /// throws std::system_error on anything else.
  std::optional<hold_type> try_acquire() { return try_acquire_for(std::chrono::milliseconds(0)); }
  /// As try_acquire(), reporting every failure (not_acquired too) through `ec`.
  std::optional<hold_type> try_acquire(std::error_code& ec) {
    return try_acquire_for(std::chrono::milliseconds(0), ec);
  }

  /// Waits at most `d` (zero or negative: one try). An empty optional when
  /// the lock stayed held; throws std::system_error on anything else.
  template <class Rep, class Period>
  std::optional<hold_type> try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    return try_acquire_until_steady(detail::deadline_after(d));
  }

  /// As above, reporting every failure (not_acquired too) through `ec`.
  template <class Rep, class Period>
  std::optional<hold_type> try_acquire_for(const std::chrono::duration<Rep, Period>& d, std::error_code& ec) {
    return acquire_hold_blocking(detail::deadline_after(d), ec);
  }

  /// Waits until `t` on any clock (measured as the time left on that clock,
  /// as std::timed_mutex does). As try_acquire_for.
  template <class Clock, class Duration>
  std::optional<hold_type> try_acquire_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_acquire_for(t - Clock::now());
  }
  template <class Clock, class Duration>
  std::optional<hold_type> try_acquire_until(const std::chrono::time_point<Clock, Duration>& t, std::error_code& ec) {
    return try_acquire_for(t - Clock::now(), ec);
  }  ///< As above, reporting every failure (not_acquired too) through `ec`.

  // ---- async: owned by an explicit owner id -------------------------------

  /// Acquires for `owner_id` (any non-empty string; async owners never
  /// collide with the std interface's thread owners), waiting as long as it
  /// takes (TryOnce: once).
  ///
  /// Completion signature: `void(error_code, Hold)`. Errors: not_acquired
  /// (TryOnce), already_held, invalid_argument (empty or longer than
  /// 4096-byte owner id), outcome_unknown (the acquire was sent and not
  /// answered, and the ownership cannot tell whether it won), connection
  /// errors, operation_aborted (cancelled).
  ///
  /// Cancellation (terminal, partial or total): a wait ends at once with
  /// operation_aborted and leaves nothing held and nothing renewing. A try
  /// already queued is not cut short: it runs, and if it won, the lock is
  /// given back before the operation completes with operation_aborted.
  template <class CompletionToken>
  auto async_acquire(std::string owner_id, CompletionToken&& token) {
    return async_acquire_until_steady(std::move(owner_id), detail::steady::time_point::max(),
                                      std::forward<CompletionToken>(token));
  }

  /// As async_acquire, giving up with not_acquired after `d` (any
  /// std::chrono::duration; zero or negative: one try).
  template <class Rep, class Period, class CompletionToken>
  auto async_try_acquire_for(std::string owner_id, const std::chrono::duration<Rep, Period>& d,
                             CompletionToken&& token) {
    return async_acquire_until_steady(std::move(owner_id), detail::deadline_after(d), std::forward<CompletionToken>(token));
  }

  /// As async_acquire, giving up with not_acquired at `t` on any clock
  /// (measured as the time left on that clock when called).
  template <class Clock, class Duration, class CompletionToken>
  auto async_try_acquire_until(std::string owner_id, const std::chrono::time_point<Clock, Duration>& t,
                               CompletionToken&& token) {
    return async_try_acquire_for(std::move(owner_id), t - Clock::now(), std::forward<CompletionToken>(token));
  }

  /// Releases `hold` (which must outlive the operation). Completion
  /// signature: `void(error_code)`, with the errors of Hold::release(); after
  /// outcome_unknown or a connection error the hold stays releasable.
  ///
  /// Cancellation (terminal, partial or total): ignored. A release runs to
  /// its end and completes with its own outcome, as if no cancellation had
  /// been asked for: once its command may have left, stopping it would
  /// leave the caller not knowing whether the lock is still held. (It is
  /// bounded by the backend's command timeout, which ends it with
  /// outcome_unknown.)
  template <class CompletionToken>
  auto async_release(hold_type& hold, CompletionToken&& token) {
    return initiate_release(this, hold, std::forward<CompletionToken>(token));
  }

  /// Where failures that cannot throw go (unlock(), ~Hold, ~Lock); by default, one line on stderr.
  void set_error_handler(std::function<void(std::error_code, const std::string& what)> handler) {
    std::lock_guard g(mutex_);
    error_handler_ = std::move(handler);
  }

  /// The hold count this lock object has for the async owner `owner_id`.
  int held_by(const std::string& owner_id) const { return held_count(owner_key(owner_id, true)); }
  /// The hold count this lock object has for the calling thread.
  int held_by_this_thread() const { return held_count(thread_owner()); }

  /// The calling thread's owner id: its number in this process (a ReentrantHash
  /// field is `<client id>:<thread number>`, as Redisson's `<client id>:<thread id>`).
  static std::string thread_owner() { return std::to_string(detail::this_thread_number()); }

  /// How the lock keys an owner: a thread's number, or "async:" + the id
  /// given to the async interface (so the two never collide).
  static std::string owner_key(const std::string& owner_id, bool async) {
    return async ? std::string(async_prefix) + owner_id : owner_id;
  }
  static std::string owner_id_of(std::string_view key, bool async) {
    if (key.starts_with(detail::shared_key_prefix)) key.remove_prefix(detail::shared_key_prefix.size());
    return std::string(async ? key.substr(async_prefix.size()) : key);
  }  ///< The inverse of owner_key() (and of a shared hold's key): the owner id a key was made from.

 private:
  friend class Hold<Lock>;
  friend class SharedInterface<Lock, true>;
  // SharedInterface's work: a shared hold's key is detail::shared_key_prefix + the owner's.
  bool shared_lock_until(detail::steady::time_point deadline, const char* what);
  void shared_unlock() noexcept;
  std::error_code shared_unlock_code();
  std::optional<hold_type> shared_acquire_until(detail::steady::time_point deadline, bool must);
  int shared_held(const std::string& owner_id, bool async) const;

  static constexpr std::string_view async_prefix = "async:";

  // The hold's record, with the ownership's own per-hold state if it has one.
  using record_type = detail::record_t<adapted_ownership>;
  using acquire_result = detail::acquire_result;
  using release_result = detail::release_result;

  // "acquire 'name'", with the server's words when it gave some.
  std::string describe(std::string_view what, const std::string& server_reply) const {
    return detail::with_server_reply(std::string(what) + " '" + name_ + "'", server_reply);
  }

  // One owner of this lock object, and a use of it (defined in lock.ipp).
  struct owner_entry;
  class entry_use;

  // The hold count of an owner (by key or entry): 0 when it holds nothing.
  int held_count(const std::string& key) const;
  int held_count(const std::shared_ptr<owner_entry>& entry) const;

  std::shared_ptr<record_type> make_record(const std::string& key) const;

  // ---- the one acquire operation ------------------------------------------

  asio::awaitable<acquire_result> acquire_op(std::string key, detail::steady::time_point deadline);

  // One acquire command; a lost or unreadable reply is resolved by asking
  // Redis, where the ownership can tell (Token: is our token there?
  // ReentrantHash: did our try leave its win marker?).
  asio::awaitable<std::pair<error_code, attempt>> try_once(record_type& rec);
  // Releases a hold just won by an acquire whose caller cancelled it;
  // completes with operation_aborted.
  asio::awaitable<acquire_result> release_cancelled_win(record_type& rec);
  // Runs the ownership's release for a hold the caller is not given (a
  // refusal's words are left on `rec`).
  asio::awaitable<error_code> release_won(record_type& rec);
  // A win confirmed with no lease left to trust (a late reply or grant): true when given back.
  asio::awaitable<bool> give_back_if_late(record_type& rec);
  // Whether a win needs settling: fencing on, or acknowledgement on.
  bool settling() const;
  // What settling a win found: an error (with the server's words), or
  // whether the win counts (if not, it was given back or found gone).
  struct settled_win {
    error_code ec;
    bool kept = true;
    std::string server_reply;
  };
  // Settles a won try or grant, the one place a win is settled: it counts
  // once it has its fencing token (fencing on) and enough replicas
  // acknowledged it (acknowledgement on). Kept at once when neither is on.
  asio::awaitable<settled_win> settle_win(record_type& rec);
  // settle_win's work: the fencing token, then the replicas' acknowledgement.
  asio::awaitable<std::pair<error_code, bool>> fence_and_acknowledge(record_type& rec);
  // With replica acknowledgement on: whether a won try may count (enough
  // replicas acknowledged its write); if not, the lock was given back.
  asio::awaitable<std::pair<error_code, bool>> keep_if_acknowledged(record_type& rec);

  // Ends a hold that is over (lost, or its lease ran out): its keeper lets
  // go, and its holders learn it.
  void retire(const std::shared_ptr<record_type>& rec);

  asio::awaitable<std::tuple<error_code, hold_type>> acquire_hold(std::string owner_id,
                                                                  detail::steady::time_point deadline, bool shared);

  // ---- the one release operation ------------------------------------------

  // Releases one hold of owner `key`. `hold_rec`: the Hold's record (null for
  // the std interface, which retries with the owner's pending release id).
  // `id`: the release id to retry with (empty: a new release). `abandon`:
  // the caller cannot retry (a destructor), so a failure ends the hold here
  // and the lock lapses with its lease. Returns the error and, when the
  // release may be retried, the id to retry with.
  asio::awaitable<release_result> release_op(std::string key, std::shared_ptr<detail::hold_record> hold_rec,
                                             std::string id, bool abandon);

  // A release that failed where nobody can retry it: this process forgets
  // the hold, renewal stops with the last one, and the lock lapses.
  void drop_one(owner_entry& entry, const std::shared_ptr<record_type>& rec);

  // Hold::async_release and Lock::async_release: an empty hold completes
  // with not_owner.
  template <class CompletionToken>
  static auto initiate_release(Lock* lock, hold_type& hold, CompletionToken&& token);

  asio::awaitable<std::tuple<error_code>> release_hold(hold_type& hold);

  // After a release attempt: keep the hold (and its release id) if it may
  // be retried, else empty it.
  static void conclude_release(hold_type& hold, const error_code& ec, std::string id);

  template <class CompletionToken>
  auto async_acquire_until_steady(std::string owner_id, detail::steady::time_point deadline, CompletionToken&& token,
                                  bool shared = false) {
    return detail::spawn_tracked<hold_type>(inflight_, asio::make_strand(backend_.get_executor()),
                                            acquire_hold(std::move(owner_id), deadline, shared),
                                            std::forward<CompletionToken>(token));
  }

  // ---- blocking glue --------------------------------------------------------

  // `server_reply`, when given, receives the server's words behind a
  // server_error.
  std::optional<hold_type> acquire_hold_blocking(detail::steady::time_point deadline, std::error_code& ec,
                                                 std::string* server_reply = nullptr, bool shared = false);

  void check_blocking_allowed() const;

  acquire_result acquire_blocking(const std::string& key, detail::steady::time_point deadline);
  // Runs a lock operation for a blocking caller (see detail::run_here).
  template <class T>
  T run_blocking(asio::awaitable<T> op);

  bool try_lock_until_steady(detail::steady::time_point deadline);
  std::optional<hold_type> try_acquire_until_steady(detail::steady::time_point deadline);

  // Never throws for a blocking-thread mistake: unlock() is noexcept and
  // destructors call this; they report would_deadlock instead.
  release_result release_blocking(const std::string& key, std::shared_ptr<detail::hold_record> rec, std::string id, bool abandon);

  error_code release_hold_blocking(hold_type& hold, std::string* server_reply = nullptr);

  // ~Hold: blocking from an ordinary thread; in the background for async
  // holds and on threads that run the backend's executor.
  void release_abandoned(std::string key, bool async, std::shared_ptr<detail::hold_record> rec, std::string id) noexcept;

  // `server_reply`: the server's words behind a server_error, if any.
  void report(std::error_code ec, const std::string& what, const std::string& server_reply = {}) noexcept;

  BackendT& backend_;
  std::string name_;
  [[no_unique_address]] adapted_ownership ownership_;
  [[no_unique_address]] RenewalT renewal_;
  [[no_unique_address]] WaitT wait_;
  // What the renewal policy does while a hold lives: the host tells it when
  // a hold starts, pauses for its last release, and ends.
  [[no_unique_address]] typename RenewalT::template keeper<BackendT> keeper_;

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<owner_entry>> owners_;  // by owner key
  std::function<void(std::error_code, const std::string&)> error_handler_;
  // ~Lock waits for these: releases sent by destroyed holds and waiters'
  // retried leaves; the async operations in flight.
  detail::background_work background_{[this](std::error_code ec, const std::string& what) { report(ec, what); }};
  detail::inflight_ops inflight_;
};

}  // namespace dlock

#include <dlock/impl/lock.ipp>
#include <dlock/impl/release.ipp>
#include <dlock/impl/blocking.ipp>
#include <dlock/impl/settle.ipp>
