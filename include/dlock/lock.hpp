// Lock<Backend, Ownership, Renewal, Wait>: the host that composes the four
// policies into a distributed lock with std, handle and Asio interfaces.
#pragma once

#include <chrono>
#include <condition_variable>
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
#include <dlock/detail/lease_watch.hpp>
#include <dlock/detail/owner_gate.hpp>
#include <dlock/detail/policy_checks.hpp>
#include <dlock/detail/random.hpp>
#include <dlock/detail/renewal_service.hpp>
#include <dlock/detail/spawn.hpp>
#include <dlock/hold.hpp>

#include <dlock/backend/redis.hpp>
#include <dlock/ownership/reentrant_hash.hpp>
#include <dlock/renewal/watchdog.hpp>
#include <dlock/wait/pubsub.hpp>

namespace dlock {

/// A distributed lock named `name` on `Backend`, built from three policies:
/// - Ownership: who holds it and the Redis side of acquire/release/extend
///   (ownership::SetNx, Token, ReentrantHash, GetSetExpiry);
/// - Renewal: how long a hold lasts and who extends it (renewal::None,
///   FixedLease, Watchdog);
/// - Wait: what to do after a failed try (wait::TryOnce, Spin, Backoff,
///   PubSub).
/// The defaults make Redisson's RLock: a reentrant hash, a 30 s watchdog
/// renewed every 10 s, and waiters woken by pub/sub.
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
///   on another thread, so "the calling thread" means nothing there).
///
/// Blocking calls must not run on a thread that runs the backend's executor
/// (see RedisBackend::on_io_thread): lock, try_lock and acquire throw
/// std::logic_error there; unlock and Hold::release send nothing and report
/// would_deadlock (unlock() through the error handler).
/// Thread safety: a Lock may be used from many threads at once; it must
/// outlive its holds and its pending operations.
///
/// Each owner's acquire tries and releases take turns (a per-owner gate), so
/// that its hold count in Redis and here change in the same order even when
/// one owner id is used from several coroutines or threads at once.
template <class BackendT = RedisBackend, class OwnershipT = ownership::ReentrantHash,
          class RenewalT = renewal::Watchdog, class WaitT = wait::PubSub>
class Lock {
  // Each family's contract, one operation at a time (a sentence each).
  static_assert(detail::policy_checks<BackendT, OwnershipT, RenewalT, WaitT>::ok,
                "dlock::Lock's parameters must be a backend, an ownership, a renewal and a wait policy");
  static_assert(rules<OwnershipT, RenewalT, WaitT>::watchdog_has_owner,
                "watchdog renewal needs an ownership policy with an owner id: use ownership::Token or ownership::ReentrantHash, or renewal::FixedLease");
  static_assert(rules<OwnershipT, RenewalT, WaitT>::lease_present,
                "this ownership policy needs a lease: use renewal::FixedLease or renewal::Watchdog (only ownership::SetNx and ownership::Token work without one)");
  static_assert(rules<OwnershipT, RenewalT, WaitT>::pubsub_has_publisher,
                "pub/sub waiting needs an ownership policy that publishes on release: use ownership::ReentrantHash, or wait::Spin / wait::Backoff");

 public:
  using backend_type = BackendT;
  using ownership_type = OwnershipT;
  using renewal_type = RenewalT;
  using wait_type = WaitT;
  using hold_type = Hold<Lock>;

  /// Checks the name and every policy parameter before anything reaches
  /// Redis: throws std::system_error with invalid_name (empty or longer than
  /// 4096 bytes), invalid_lease (zero or negative) or invalid_interval.
  Lock(BackendT& backend, std::string name, OwnershipT ownership = {}, RenewalT renewal = {},
       WaitT wait = {})
      : backend_(backend),
        name_(std::move(name)),
        ownership_(std::move(ownership)),
        renewal_(std::move(renewal)),
        wait_(std::move(wait)) {
    if (auto ec = detail::validate_name(name_)) throw std::system_error(ec, "dlock::Lock name");
    if (auto ec = ownership_.validate()) throw std::system_error(ec, "dlock::Lock ownership policy");
    if (auto ec = renewal_.validate()) throw std::system_error(ec, "dlock::Lock renewal policy");
    if (auto ec = wait_.validate()) throw std::system_error(ec, "dlock::Lock wait policy");
  }

  /// Releases whatever this lock object still holds (the std interface's
  /// holds; holds must not outlive their lock). Waits for releases that
  /// destroyed holds sent in the background. On the backend's own thread it
  /// cannot wait: renewal stops and the holds lapse with their leases.
  ~Lock() {
    bool can_wait = !backend_.on_io_thread();
    if (can_wait) {
      std::unique_lock g(mutex_);
      background_done_.wait(g, [&] { return background_releases_ == 0; });
    }
    std::vector<std::pair<std::string, std::shared_ptr<owner_entry>>> left;
    {
      std::lock_guard g(mutex_);
      for (auto& [key, entry] : owners_)
        if (entry->rec) left.emplace_back(key, entry);
    }
    for (auto& [key, entry] : left) {
      auto rec = entry->rec;
      if (!can_wait) {
        if constexpr (RenewalT::renews) renewals().remove(rec.get());
        watch().remove(rec.get());
        report(make_error_code(error::would_deadlock), "~Lock on the backend's own thread (holds lapse with their leases)");
        continue;
      }
      while (held_count(entry) > 0) {
        auto ec = run_release(key, nullptr, {}, /*abandon=*/true).first;
        if (ec) {
          report(ec, "release in ~Lock");
          break;
        }
      }
    }
  }

  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  const std::string& name() const noexcept { return name_; }
  BackendT& backend() noexcept { return backend_; }
  const OwnershipT& ownership() const noexcept { return ownership_; }
  const RenewalT& renewal() const noexcept { return renewal_; }
  const WaitT& wait_policy() const noexcept { return wait_; }

  /// "token/watchdog/pubsub": the policies' names.
  static std::string combination_name() {
    return std::string(OwnershipT::policy_name) + "/" + RenewalT::policy_name + "/" + WaitT::policy_name;
  }

  // ---- std TimedLockable: owned by the calling thread --------------------

  /// Waits as long as it takes (with TryOnce: one try). Throws
  /// std::system_error: not_acquired (TryOnce only), already_held (this
  /// thread holds a non-reentrant lock), outcome_unknown, connection errors.
  void lock() {
    auto ec = acquire_blocking(thread_owner(), detail::steady::time_point::max()).first;
    if (ec) throw std::system_error(ec, "lock '" + name_ + "'");
  }

  /// One try. False when held by someone else; throws on other errors.
  bool try_lock() { return try_lock_until_steady(detail::steady::now()); }

  /// Waits at most `d` (a negative duration is a zero one; a huge one waits
  /// without bound).
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return try_lock_until_steady(deadline_after(d));
  }

  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_lock_for(t - Clock::now());
  }

  /// Releases one hold of the calling thread. Never throws (std::unique_lock
  /// calls it from a destructor): a failure goes to the error handler. Use
  /// unlock(ec) to see it.
  void unlock() noexcept {
    std::error_code ec;
    unlock(ec);
    if (ec) report(ec, "unlock");
  }

  /// As unlock(), reporting not_owner (this thread holds nothing),
  /// lease_lost, outcome_unknown, connection errors, or would_deadlock (on
  /// a thread that runs the backend's executor; nothing was sent). After
  /// outcome_unknown, this thread's next unlock() retries that release and
  /// reports what it did (exactly once within the ownership's
  /// `release_memory.window`, for Token and ReentrantHash).
  void unlock(std::error_code& ec) { ec = run_release(thread_owner(), nullptr, {}, false).first; }

  // ---- handles: owned by the calling thread ------------------------------

  /// Waits as lock() does and returns the hold. Throws as lock().
  hold_type acquire() {
    auto owner = thread_owner();
    auto [ec, rec] = acquire_blocking(owner, detail::steady::time_point::max());
    if (ec) throw std::system_error(ec, "acquire '" + name_ + "'");
    return hold_type(this, std::move(owner), false, std::move(rec));
  }

  /// Waits at most `d` (zero: one try). An empty optional when the lock
  /// stayed held; throws std::system_error on anything else.
  template <class Rep, class Period>
  std::optional<hold_type> try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    std::error_code ec;
    auto h = try_acquire_for(d, ec);
    if (ec == error::not_acquired) return std::nullopt;
    if (ec) throw std::system_error(ec, "acquire '" + name_ + "'");
    return h;
  }

  /// As above, reporting every failure (not_acquired too) through `ec`.
  template <class Rep, class Period>
  std::optional<hold_type> try_acquire_for(const std::chrono::duration<Rep, Period>& d, std::error_code& ec) {
    auto owner = thread_owner();
    auto [aec, rec] = acquire_blocking(owner, deadline_after(d));
    ec = aec;
    if (ec) return std::nullopt;
    return hold_type(this, std::move(owner), false, std::move(rec));
  }

  std::optional<hold_type> try_acquire() { return try_acquire_for(std::chrono::milliseconds(0)); }

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
    return async_try_acquire_until(std::move(owner_id), detail::steady::time_point::max(),
                                   std::forward<CompletionToken>(token));
  }

  /// As async_acquire, giving up with not_acquired after `d`.
  template <class CompletionToken>
  auto async_try_acquire_for(std::string owner_id, milliseconds d, CompletionToken&& token) {
    return async_try_acquire_until(std::move(owner_id), deadline_after(d), std::forward<CompletionToken>(token));
  }

  template <class CompletionToken>
  auto async_try_acquire_until(std::string owner_id, detail::steady::time_point deadline,
                               CompletionToken&& token) {
    return detail::spawn<hold_type>(asio::make_strand(backend_.get_executor()),
                                    acquire_hold(std::move(owner_id), deadline),
                                    std::forward<CompletionToken>(token));
  }

  /// Releases `hold` (which must outlive the operation). Completion
  /// signature: `void(error_code)`, with the errors of Hold::release(); after
  /// outcome_unknown or a connection error the hold stays releasable.
  template <class CompletionToken>
  auto async_release(hold_type& hold, CompletionToken&& token) {
    return async_release(this, hold, std::forward<CompletionToken>(token));
  }

  /// Where failures that cannot throw go (unlock(), ~Hold, ~Lock). The
  /// default prints one line to stderr.
  void set_error_handler(std::function<void(std::error_code, const std::string& what)> handler) {
    std::lock_guard g(mutex_);
    error_handler_ = std::move(handler);
  }

  /// The hold count this lock object has for the async owner `owner_id`.
  int held_by(const std::string& owner_id) const { return held_count(owner_key(owner_id, true)); }
  /// The hold count this lock object has for the calling thread.
  int held_by_this_thread() const { return held_count(thread_owner()); }

  /// The calling thread's owner id: its number in this process. A
  /// ReentrantHash field is `<client id>:<thread number>`, as Redisson's
  /// `<client id>:<thread id>`.
  static std::string thread_owner() { return std::to_string(detail::this_thread_number()); }

  /// How the lock keys an owner: a thread's number, or "async:" + the id
  /// given to the async interface (so the two never collide).
  static std::string owner_key(const std::string& owner_id, bool async) {
    return async ? std::string(async_prefix) + owner_id : owner_id;
  }
  static std::string owner_id_of(const std::string& key, bool async) {
    return async ? key.substr(async_prefix.size()) : key;
  }

 private:
  friend class Hold<Lock>;

  static constexpr std::string_view async_prefix = "async:";

  using acquire_result = std::pair<error_code, std::shared_ptr<detail::hold_record>>;
  using release_result = std::pair<error_code, std::string>;  // and the id to retry with

  // One owner of this lock object: its hold (if any) and the gate its
  // acquire tries and releases pass one at a time.
  struct owner_entry {
    detail::owner_gate gate;
    std::shared_ptr<detail::hold_record> rec;  // the current hold; null when none (mutex_)
    std::string pending_release;  // the std interface's release to retry (mutex_)
    int users = 0;                // operations using this entry (mutex_)
  };

  // Keeps an owner entry in owners_ while an operation uses it.
  class entry_use {
   public:
    entry_use(Lock* lock, std::string key, bool create) : lock_(lock), key_(std::move(key)) {
      std::lock_guard g(lock_->mutex_);
      auto it = lock_->owners_.find(key_);
      if (it == lock_->owners_.end()) {
        if (!create) return;
        it = lock_->owners_.emplace(key_, std::make_shared<owner_entry>()).first;
      }
      entry_ = it->second;
      ++entry_->users;
    }
    ~entry_use() {
      if (!entry_) return;
      std::lock_guard g(lock_->mutex_);
      if (--entry_->users == 0 && !entry_->rec && entry_->pending_release.empty()) {
        auto it = lock_->owners_.find(key_);
        if (it != lock_->owners_.end() && it->second == entry_) lock_->owners_.erase(it);
      }
    }
    entry_use(const entry_use&) = delete;
    entry_use& operator=(const entry_use&) = delete;
    owner_entry* operator->() const noexcept { return entry_.get(); }
    owner_entry& operator*() const noexcept { return *entry_; }
    explicit operator bool() const noexcept { return entry_ != nullptr; }

   private:
    Lock* lock_;
    std::string key_;
    std::shared_ptr<owner_entry> entry_;
  };

  detail::renewal_service<BackendT>& renewals() {
    return backend_.template use_service<detail::renewal_service<BackendT>>();
  }
  // Where the ownership's release publishes, for a wait that listens.
  std::string release_channel() const {
    if constexpr (OwnershipT::publishes_on_release) return OwnershipT::channel(name_);
    else return {};
  }

  detail::lease_watch<BackendT>& watch() { return backend_.template use_service<detail::lease_watch<BackendT>>(); }

  template <class Rep, class Period>
  static detail::steady::time_point deadline_after(const std::chrono::duration<Rep, Period>& d) {
    auto now = detail::steady::now();
    if (d <= d.zero()) return now;
    // Saturate: try_lock_for(hours::max()) means "no deadline", not overflow.
    using fsec = std::chrono::duration<double>;
    if (std::chrono::duration_cast<fsec>(d) >= std::chrono::duration_cast<fsec>(detail::steady::time_point::max() - now))
      return detail::steady::time_point::max();
    return now + std::chrono::ceil<detail::steady::duration>(d);
  }

  int held_count(const std::string& key) const {
    std::lock_guard g(mutex_);
    auto it = owners_.find(key);
    return it == owners_.end() || !it->second->rec ? 0 : it->second->rec->hold_count;
  }
  int held_count(const std::shared_ptr<owner_entry>& entry) const {
    std::lock_guard g(mutex_);
    return entry->rec ? entry->rec->hold_count : 0;
  }

  std::shared_ptr<detail::hold_record> make_record(const std::string& key) const {
    auto rec = std::make_shared<detail::hold_record>();
    rec->name = name_;
    rec->owner = ownership_.make_owner(backend_.client_id(), key);
    rec->lease = renewal_.lease();
    rec->margin = renewal_.margin();
    return rec;
  }

  // ---- the one acquire operation ------------------------------------------

  asio::awaitable<acquire_result> acquire_op(std::string key, detail::steady::time_point deadline) {
    co_await asio::this_coro::throw_if_cancelled(false);
    co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
    auto cancelled = [&]() -> asio::awaitable<bool> {
      auto state = co_await asio::this_coro::cancellation_state;
      co_return state.cancelled() != asio::cancellation_type::none;
    };

    entry_use entry(this, key, true);
    typename WaitT::template waiter<BackendT> waiter(wait_, backend_, name_, release_channel());
    std::shared_ptr<detail::hold_record> fresh;  // ours if we win a free lock
    bool prepared = false;
    for (;;) {
      attempt at;
      {
        // One try, with its bookkeeping, while no other operation of this
        // owner runs: Redis's hold count and ours move together.
        co_await entry->gate.enter();
        detail::gate_pass pass(entry->gate);
        std::shared_ptr<detail::hold_record> rec, retired;
        {
          std::lock_guard g(mutex_);
          // A hold found lost, or whose lease ran out unrenewed, is over:
          // a new acquire starts afresh instead of counting on it.
          if (entry->rec && (entry->rec->lost() || entry->rec->remaining() == milliseconds::zero()))
            retired = std::exchange(entry->rec, nullptr);
          rec = entry->rec;
        }
        if (retired) retire(retired);
        if (rec) {
          if constexpr (!OwnershipT::reentrant) co_return acquire_result{error::already_held, nullptr};
        } else {
          if (!fresh) fresh = make_record(key);
          rec = fresh;
        }
        auto [ec, won] = co_await try_once(*rec);
        if (ec) co_return acquire_result{ec, nullptr};
        at = won;
        if (at.acquired) {
          if (co_await cancelled()) {
            // Won, but the caller gave up: give it back before completing.
            rec->release_id = detail::unique_id();
            auto [gec, outcome] = co_await ownership_.release(backend_, *rec);
            if (gec) report(gec, "giving back a cancelled acquire (the lock lapses with its lease)");
            co_return acquire_result{asio::error::operation_aborted, nullptr};
          }
          bool first = false;
          {
            std::lock_guard g(mutex_);
            first = ++rec->hold_count == 1;
            entry->rec = rec;
            // A new hold: an unanswered release of an earlier one is moot.
            if (first) entry->pending_release.clear();
          }
          if (first) {
            watch().add(rec);
            if constexpr (RenewalT::renews) renewals().add(rec, ownership_.extend_call(*rec), renewal_.period());
          }
          co_return acquire_result{error_code{}, rec};
        }
      }
      if (!WaitT::retries || detail::steady::now() >= deadline)
        co_return acquire_result{error::not_acquired, nullptr};
      if (co_await cancelled()) co_return acquire_result{asio::error::operation_aborted, nullptr};
      if (!prepared) {
        // Only a contended acquire pays for the wait's set-up (PubSub's
        // SUBSCRIBE). Once subscribed, try again at once: a release between
        // the first try and the subscription sent no message we could hear.
        prepared = true;
        if (auto pec = co_await waiter.prepare()) co_return acquire_result{pec, nullptr};
        if constexpr (WaitT::needs_publish) continue;
      }
      if (auto wec = co_await waiter.wait(at.held_for, deadline)) co_return acquire_result{wec, nullptr};
    }
  }

  // One acquire command; a lost or unreadable reply is resolved by asking
  // Redis, where the ownership can tell (Token: is our token there?
  // ReentrantHash: did our try leave its win marker?).
  asio::awaitable<std::pair<error_code, attempt>> try_once(detail::hold_record& rec) {
    rec.attempt_id = detail::unique_id();
    auto sent = detail::steady::now();
    auto [ec, at] = co_await ownership_.try_acquire(backend_, rec);
    if constexpr (OwnershipT::resolves_unknown) {
      if (detail::may_have_run(ec)) {
        auto [rec_ec, won] = co_await ownership_.resolve(backend_, rec);
        if (rec_ec) co_return std::pair{ec, attempt{}};  // still unknown
        if (won) rec.confirm(sent);
        co_return std::pair{error_code{}, attempt{won, milliseconds(0)}};
      }
    }
    co_return std::pair{ec, at};
  }

  // Ends a hold that is over (lost, or its lease ran out): no renewal, and
  // its holders learn it.
  void retire(const std::shared_ptr<detail::hold_record>& rec) {
    if constexpr (RenewalT::renews) renewals().remove(rec.get());
    watch().remove(rec.get());
    rec->mark_lost();
  }

  asio::awaitable<std::tuple<error_code, hold_type>> acquire_hold(std::string owner_id,
                                                                  detail::steady::time_point deadline) {
    if (owner_id.empty() || owner_id.size() > max_name_length)
      co_return std::tuple<error_code, hold_type>{error::invalid_argument, hold_type{}};
    auto key = owner_key(owner_id, true);
    auto [ec, rec] = co_await acquire_op(key, deadline);
    if (ec) co_return std::tuple<error_code, hold_type>{ec, hold_type{}};
    co_return std::tuple<error_code, hold_type>{error_code{}, hold_type(this, std::move(key), true, std::move(rec))};
  }

  // ---- the one release operation ------------------------------------------

  // Releases one hold of owner `key`. `hold_rec`: the Hold's record (null for
  // the std interface, which retries with the owner's pending release id).
  // `id`: the release id to retry with (empty: a new release). `abandon`:
  // the caller cannot retry (a destructor), so a failure ends the hold here
  // and the lock lapses with its lease. Returns the error and, when the
  // release may be retried, the id to retry with.
  asio::awaitable<release_result> release_op(std::string key, std::shared_ptr<detail::hold_record> hold_rec,
                                             std::string id, bool abandon) {
    entry_use entry(this, key, false);
    auto gone = [&] {
      return release_result{hold_rec && hold_rec->lost() ? error::lease_lost : error::not_owner, std::string()};
    };
    if (!entry) co_return gone();
    co_await entry->gate.enter();
    detail::gate_pass pass(entry->gate);
    std::shared_ptr<detail::hold_record> rec;
    bool last = false;
    {
      std::lock_guard g(mutex_);
      rec = entry->rec;
      if (!rec) entry->pending_release.clear();  // whatever it was about is over
      if (!rec || (hold_rec && rec != hold_rec)) co_return gone();
      last = rec->hold_count <= 1;
      if (!hold_rec) id = std::exchange(entry->pending_release, std::string());
    }
    bool retry = !id.empty();
    // A hold already signalled lost stays lost: the release still runs (the
    // key may still be ours), but its holder hears lease_lost, as it did
    // from the loss signal.
    bool signalled = rec->lost();
    // Renewal stops before the release is queued: no renewal can follow it.
    if constexpr (RenewalT::renews) {
      if (last) renewals().remove(rec.get());
    }
    if (!retry) id = detail::unique_id();
    rec->release_id = id;
    auto [ec, outcome] = co_await ownership_.release(backend_, *rec);
    if (ec) {
      if (abandon) {
        drop_one(*entry, rec);
        co_return release_result{ec, std::string()};
      }
      if constexpr (RenewalT::renews) {
        // Not run: still held, so keep it alive, unless an earlier attempt
        // of this release may have run.
        if (last && !retry && !detail::may_have_run(ec)) renewals().add(rec, ownership_.extend_call(*rec), renewal_.period());
      }
      if (!hold_rec) {
        std::lock_guard g(mutex_);
        entry->pending_release = id;
      }
      co_return release_result{ec, id};
    }
    bool lost = outcome == release_outcome::lease_lost || outcome == release_outcome::not_owner;
    bool others_lost = false, ended = false;
    {
      std::lock_guard g(mutex_);
      if (outcome == release_outcome::still_held && rec->hold_count > 1) {
        --rec->hold_count;
      } else {
        // The last local hold ended (a still_held reply then means another
        // lock object of this owner still counts in the hash), or the key is
        // gone: any other hold of this record has ended with it.
        others_lost = outcome == release_outcome::released && rec->hold_count > 1;
        rec->hold_count = 0;
        if (entry->rec == rec) entry->rec = nullptr;
        ended = true;
      }
    }
    if (ended) watch().remove(rec.get());
    if (lost || others_lost) retire(rec);
    co_return release_result{lost || signalled ? error_code(error::lease_lost) : error_code{}, std::string()};
  }

  // A release that failed where nobody can retry it: this process forgets
  // the hold, renewal stops with the last one, and the lock lapses.
  void drop_one(owner_entry& entry, const std::shared_ptr<detail::hold_record>& rec) {
    bool ended = false;
    {
      std::lock_guard g(mutex_);
      if (--rec->hold_count <= 0) {
        rec->hold_count = 0;
        if (entry.rec == rec) entry.rec = nullptr;
        ended = true;
      }
    }
    if (ended) watch().remove(rec.get());
  }

  template <class CompletionToken>
  static auto async_release(Lock* lock, hold_type& hold, CompletionToken&& token) {
    if (!lock || !hold.record_) {
      return asio::async_initiate<CompletionToken, void(error_code)>(
          [](auto handler) {
            auto ex = asio::get_associated_executor(handler);
            asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(error::not_owner); });
          },
          token);
    }
    return detail::spawn<>(asio::make_strand(lock->backend_.get_executor()), lock->release_hold(hold),
                           std::forward<CompletionToken>(token));
  }

  asio::awaitable<std::tuple<error_code>> release_hold(hold_type& hold) {
    auto [ec, id] = co_await release_op(hold.owner_key_, hold.record_, hold.release_id_, false);
    settle(hold, ec, std::move(id));
    co_return std::tuple<error_code>{ec};
  }

  // After a release attempt: keep the hold (and its release id) if it may
  // be retried, else empty it.
  static void settle(hold_type& hold, const error_code& ec, std::string id) {
    if (hold_type::keep_after(ec)) hold.release_id_ = std::move(id);
    else hold.forget();
  }

  // ---- blocking glue --------------------------------------------------------

  void check_blocking_allowed() const {
    if (backend_.on_io_thread())
      throw std::logic_error("dlock: a blocking lock call on a thread that runs the backend's executor would deadlock; use the async interface there");
  }

  acquire_result acquire_blocking(const std::string& key, detail::steady::time_point deadline) {
    check_blocking_allowed();
    return asio::co_spawn(asio::make_strand(backend_.get_executor()), acquire_op(key, deadline), asio::use_future)
        .get();
  }

  bool try_lock_until_steady(detail::steady::time_point deadline) {
    auto ec = acquire_blocking(thread_owner(), deadline).first;
    if (ec == error::not_acquired) return false;
    if (ec) throw std::system_error(ec, "try_lock '" + name_ + "'");
    return true;
  }

  // Never throws for a blocking-thread mistake: unlock() is noexcept and
  // destructors call this; they report would_deadlock instead.
  release_result run_release(const std::string& key, std::shared_ptr<detail::hold_record> rec, std::string id,
                             bool abandon) {
    if (backend_.on_io_thread()) return release_result{error::would_deadlock, std::move(id)};
    return asio::co_spawn(asio::make_strand(backend_.get_executor()),
                          release_op(key, std::move(rec), std::move(id), abandon), asio::use_future)
        .get();
  }

  error_code release_blocking(hold_type& hold) {
    auto [ec, id] = run_release(hold.owner_key_, hold.record_, hold.release_id_, false);
    settle(hold, ec, std::move(id));
    return ec;
  }

  // ~Hold: blocking from an ordinary thread; in the background for async
  // holds and on threads that run the backend's executor.
  void release_from_destructor(std::string key, bool async, std::shared_ptr<detail::hold_record> rec,
                               std::string id) noexcept {
    try {
      if (async || backend_.on_io_thread()) {
        {
          std::lock_guard g(mutex_);
          ++background_releases_;
        }
        asio::co_spawn(asio::make_strand(backend_.get_executor()), release_op(std::move(key), rec, std::move(id), true),
                       [this](std::exception_ptr ep, release_result r) {
                         if (ep) report(make_error_code(error::unexpected_exception), "release in ~Hold: " + what(ep));
                         else if (r.first) report(r.first, "release in ~Hold");
                         std::lock_guard g(mutex_);
                         if (--background_releases_ == 0) background_done_.notify_all();
                       });
        return;
      }
      if (auto ec = run_release(key, std::move(rec), std::move(id), true).first) report(ec, "release in ~Hold");
    } catch (...) {
      report(make_error_code(error::unexpected_exception), "release in ~Hold: " + what(std::current_exception()));
    }
  }

  static std::string what(std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception not derived from std::exception";
    }
  }

  void report(std::error_code ec, const std::string& what) noexcept {
    try {
      std::function<void(std::error_code, const std::string&)> handler;
      {
        std::lock_guard g(mutex_);
        handler = error_handler_;
      }
      if (handler) handler(ec, what);
      else std::fprintf(stderr, "dlock: %s of lock '%s' failed: %s\n", what.c_str(), name_.c_str(), ec.message().c_str());
    } catch (...) {
      std::fprintf(stderr, "dlock: %s of lock '%s' failed, and its error handler threw\n", what.c_str(), name_.c_str());
    }
  }

  BackendT& backend_;
  std::string name_;
  [[no_unique_address]] OwnershipT ownership_;
  [[no_unique_address]] RenewalT renewal_;
  [[no_unique_address]] WaitT wait_;

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<owner_entry>> owners_;  // by owner key
  std::function<void(std::error_code, const std::string&)> error_handler_;
  int background_releases_ = 0;  // releases sent by destroyed holds (mutex_)
  std::condition_variable background_done_;
};

}  // namespace dlock
