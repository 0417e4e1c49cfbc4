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
#include <system_error>
#include <tuple>

#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/concepts.hpp>
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
/// Blocking calls must not run on the backend's I/O thread (they throw
/// std::logic_error there). Thread safety: a Lock may be used from many
/// threads at once; it must outlive its holds and its pending operations.
template <class BackendT = RedisBackend, class OwnershipT = ownership::ReentrantHash,
          class RenewalT = renewal::Watchdog, class WaitT = wait::PubSub>
class Lock {
  static_assert(Backend<BackendT>, "the first parameter of dlock::Lock must be a backend (e.g. dlock::RedisBackend)");
  static_assert(Ownership<OwnershipT>, "the second parameter of dlock::Lock must be an ownership policy from dlock::ownership");
  static_assert(Renewal<RenewalT>, "the third parameter of dlock::Lock must be a renewal policy from dlock::renewal");
  static_assert(Wait<WaitT>, "the fourth parameter of dlock::Lock must be a wait policy from dlock::wait");
  static_assert(rules<OwnershipT, RenewalT, WaitT>::watchdog_has_owner,
                "watchdog renewal needs an ownership policy with an owner id: use ownership::Token or ownership::ReentrantHash, or renewal::FixedLease");
  static_assert(rules<OwnershipT, RenewalT, WaitT>::lease_present,
                "this ownership policy needs a lease: use renewal::FixedLease or renewal::Watchdog (only ownership::SetNx works without one)");
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

  /// Releases what the std interface still holds (renewal stops either way).
  ~Lock() {
    std::map<std::string, std::shared_ptr<detail::hold_record>> left;
    {
      std::lock_guard g(mutex_);
      left.swap(holds_);
    }
    for (auto& [owner, rec] : left) {
      if constexpr (RenewalT::renews) renewals().remove(rec.get());
      if (!backend_.on_io_thread()) {
        while (rec->hold_count > 0) {
          auto ec = run_release(owner, rec, /*registered=*/false);
          if (ec) {
            report(ec, "release in ~Lock");
            break;
          }
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
    auto ec = acquire_blocking(thread_owner(), detail::steady::time_point::max());
    if (ec) throw std::system_error(ec, "lock '" + name_ + "'");
  }

  /// One try. False when held by someone else; throws on other errors.
  bool try_lock() { return try_lock_until_steady(detail::steady::now()); }

  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return try_lock_until_steady(detail::steady::now() +
                                 std::chrono::ceil<detail::steady::duration>(std::max(d, d.zero())));
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
  /// lease_lost, outcome_unknown (safe to call again) or connection errors.
  void unlock(std::error_code& ec) {
    ec = run_release(thread_owner(), nullptr, true);
  }

  // ---- handles: owned by the calling thread ------------------------------

  /// Waits as lock() does and returns the hold. Throws as lock().
  hold_type acquire() {
    auto owner = thread_owner();
    std::shared_ptr<detail::hold_record> rec;
    auto ec = acquire_blocking(owner, detail::steady::time_point::max(), &rec);
    if (ec) throw std::system_error(ec, "acquire '" + name_ + "'");
    return hold_type(this, std::move(owner), std::move(rec));
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
    std::shared_ptr<detail::hold_record> rec;
    ec = acquire_blocking(owner,
                          detail::steady::now() + std::chrono::ceil<detail::steady::duration>(std::max(d, d.zero())),
                          &rec);
    if (ec) return std::nullopt;
    return hold_type(this, std::move(owner), std::move(rec));
  }

  std::optional<hold_type> try_acquire() { return try_acquire_for(std::chrono::milliseconds(0)); }

  // ---- async: owned by an explicit owner id -------------------------------

  /// Acquires for `owner_id`, waiting as long as it takes (TryOnce: once).
  ///
  /// Completion signature: `void(error_code, Hold)`. Errors: not_acquired
  /// (TryOnce), already_held, outcome_unknown (the acquire was sent and not
  /// answered, and the ownership cannot tell whether it won), connection
  /// errors, operation_aborted (cancelled).
  ///
  /// Cancellation (terminal, partial or total): a wait ends at once with
  /// operation_aborted and leaves nothing held and nothing renewing; an
  /// acquire command already sent completes first, and if it won, the lock is
  /// released before the operation completes with operation_aborted.
  template <class CompletionToken>
  auto async_acquire(std::string owner_id, CompletionToken&& token) {
    return async_try_acquire_until(std::move(owner_id), detail::steady::time_point::max(),
                                   std::forward<CompletionToken>(token));
  }

  /// As async_acquire, giving up with not_acquired after `d`.
  template <class CompletionToken>
  auto async_try_acquire_for(std::string owner_id, milliseconds d, CompletionToken&& token) {
    return async_try_acquire_until(std::move(owner_id), detail::steady::now() + std::max(d, milliseconds::zero()),
                                   std::forward<CompletionToken>(token));
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
    return detail::spawn<>(asio::make_strand(backend_.get_executor()), release_hold(hold),
                           std::forward<CompletionToken>(token));
  }

  /// Where failures that cannot throw go (unlock(), ~Hold, ~Lock). The
  /// default prints one line to stderr.
  void set_error_handler(std::function<void(std::error_code, const std::string& what)> handler) {
    std::lock_guard g(mutex_);
    error_handler_ = std::move(handler);
  }

  /// The hold count this process has for `owner_id` (0 if none).
  int held_by(const std::string& owner_id) const {
    std::lock_guard g(mutex_);
    auto it = holds_.find(owner_id);
    return it == holds_.end() ? 0 : it->second->hold_count;
  }

  /// The owner id the std and handle interfaces use for the calling thread.
  static std::string thread_owner() { return std::to_string(detail::this_thread_number()); }

 private:
  friend class Hold<Lock>;

  detail::renewal_service<BackendT>& renewals() {
    return backend_.template use_service<detail::renewal_service<BackendT>>();
  }

  // ---- the one acquire operation ------------------------------------------

  asio::awaitable<std::tuple<error_code, std::shared_ptr<detail::hold_record>>> acquire_op(
      std::string owner_id, detail::steady::time_point deadline) {
    using result = std::tuple<error_code, std::shared_ptr<detail::hold_record>>;
    co_await asio::this_coro::throw_if_cancelled(false);
    co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
    auto cancelled = [&]() -> asio::awaitable<bool> {
      auto state = co_await asio::this_coro::cancellation_state;
      co_return state.cancelled() != asio::cancellation_type::none;
    };

    std::shared_ptr<detail::hold_record> rec;
    int expected = 1;  // the hold count Redis has once we win
    {
      std::lock_guard g(mutex_);
      if (auto it = holds_.find(owner_id); it != holds_.end()) {
        if constexpr (!OwnershipT::reentrant) co_return result{error::already_held, nullptr};
        rec = it->second;
        expected = rec->hold_count + 1;
      }
    }
    if (!rec) rec = make_record(owner_id);

    typename WaitT::template waiter<BackendT> waiter(wait_, backend_, name_);
    bool prepared = false;
    for (;;) {
      auto sent = detail::steady::now();
      auto [ec, at] = co_await ownership_.try_acquire(backend_, *rec);
      if (ec == error::outcome_unknown) {
        if constexpr (OwnershipT::resolves_unknown) {
          // Ask Redis whether the lost command won: an owner-checked
          // ownership can tell.
          auto [cec, count] = co_await ownership_.held_count(backend_, *rec);
          if (cec) co_return result{ec, nullptr};
          ec = {};
          at = attempt{count >= expected, milliseconds(0)};
          if (at.acquired) rec->set_valid_until(sent + rec->lease);
        } else {
          co_return result{ec, nullptr};
        }
      }
      if (ec) co_return result{ec, nullptr};
      if (at.acquired) {
        if (co_await cancelled()) {
          // Won, but the caller gave up: give it back before completing.
          rec->release_id = detail::random_hex(8);
          co_await ownership_.release(backend_, *rec);
          rec->release_id.clear();  // the next release is a new one
          co_return result{asio::error::operation_aborted, nullptr};
        }
        bool first = false;
        {
          std::lock_guard g(mutex_);
          first = ++rec->hold_count == 1;
          holds_[owner_id] = rec;
        }
        if constexpr (RenewalT::renews) {
          if (first) renewals().add(rec, ownership_.extend_call(*rec), renewal_.period());
        }
        co_return result{error_code{}, rec};
      }
      if (!WaitT::retries || detail::steady::now() >= deadline)
        co_return result{error::not_acquired, nullptr};
      if (co_await cancelled()) co_return result{asio::error::operation_aborted, nullptr};
      if (!prepared) {
        // Only a contended acquire pays for the wait's set-up (PubSub's
        // SUBSCRIBE). Once subscribed, try again at once: a release between
        // the first try and the subscription sent no message we could hear.
        prepared = true;
        if (auto pec = co_await waiter.prepare()) co_return result{pec, nullptr};
        if constexpr (WaitT::needs_publish) continue;
      }
      if (auto wec = co_await waiter.wait(at.held_for, deadline)) co_return result{wec, nullptr};
    }
  }

  std::shared_ptr<detail::hold_record> make_record(const std::string& owner_id) const {
    auto rec = std::make_shared<detail::hold_record>();
    rec->name = name_;
    rec->owner = ownership_.make_owner(backend_.client_id(), owner_id);
    rec->lease = renewal_.lease();
    return rec;
  }

  asio::awaitable<std::tuple<error_code, hold_type>> acquire_hold(std::string owner_id,
                                                                  detail::steady::time_point deadline) {
    auto [ec, rec] = co_await acquire_op(owner_id, deadline);
    if (ec) co_return std::tuple<error_code, hold_type>{ec, hold_type{}};
    co_return std::tuple<error_code, hold_type>{error_code{}, hold_type(this, std::move(owner_id), std::move(rec))};
  }

  // ---- the one release operation ------------------------------------------

  // Releases one hold of `owner_id`. `expected` is the hold's record (null
  // for the std interface, which looks it up).
  asio::awaitable<error_code> release_op(std::string owner_id, std::shared_ptr<detail::hold_record> expected,
                                         bool registered) {
    std::shared_ptr<detail::hold_record> rec = expected;
    bool last = false;
    {
      std::lock_guard g(mutex_);
      if (registered) {
        auto it = holds_.find(owner_id);
        if (it == holds_.end() || (expected && it->second != expected)) co_return error::not_owner;
        rec = it->second;
      }
      last = rec->hold_count <= 1;
    }
    // Renewal stops before the release is queued: no renewal can follow it.
    if constexpr (RenewalT::renews) {
      if (last) renewals().remove(rec.get());
    }
    if (rec->release_id.empty()) rec->release_id = detail::random_hex(8);
    auto [ec, outcome] = co_await ownership_.release(backend_, *rec);
    if (ec) {
      if constexpr (RenewalT::renews) {
        // Not sent at all: still held, so keep it alive. (After
        // outcome_unknown it may be gone; letting it lapse is the safe side.)
        if (last && ec != error::outcome_unknown && ec != error::server_error)
          renewals().add(rec, ownership_.extend_call(*rec), renewal_.period());
      }
      co_return ec;
    }
    rec->release_id.clear();
    bool lost = outcome == release_outcome::lease_lost || outcome == release_outcome::not_owner;
    {
      std::lock_guard g(mutex_);
      if (lost || outcome == release_outcome::released) rec->hold_count = 0;
      else --rec->hold_count;
      if (rec->hold_count <= 0) {
        rec->hold_count = 0;
        auto it = holds_.find(owner_id);
        if (it != holds_.end() && it->second == rec) holds_.erase(it);
      }
    }
    if (lost) {
      if constexpr (RenewalT::renews) renewals().remove(rec.get());
      rec->mark_lost();
      co_return make_error_code(error::lease_lost);
    }
    co_return error_code{};
  }

  asio::awaitable<std::tuple<error_code>> release_hold(hold_type& hold) {
    if (!hold.record_) co_return std::tuple<error_code>{error::not_owner};
    auto ec = co_await release_op(hold.owner_id_, hold.record_, true);
    if (!hold_type::keep_after(ec)) hold.forget();
    co_return std::tuple<error_code>{ec};
  }

  // ---- blocking glue --------------------------------------------------------

  void check_blocking_allowed() const {
    if (backend_.on_io_thread())
      throw std::logic_error("dlock: a blocking lock call on the backend's I/O thread would deadlock; use the async interface there");
  }

  error_code acquire_blocking(const std::string& owner, detail::steady::time_point deadline,
                              std::shared_ptr<detail::hold_record>* out = nullptr) {
    check_blocking_allowed();
    auto fut = asio::co_spawn(asio::make_strand(backend_.get_executor()), acquire_op(owner, deadline),
                              asio::use_future);
    auto [ec, rec] = fut.get();
    if (out) *out = std::move(rec);
    return ec;
  }

  bool try_lock_until_steady(detail::steady::time_point deadline) {
    auto ec = acquire_blocking(thread_owner(), deadline);
    if (ec == error::not_acquired) return false;
    if (ec) throw std::system_error(ec, "try_lock '" + name_ + "'");
    return true;
  }

  error_code run_release(const std::string& owner, std::shared_ptr<detail::hold_record> rec, bool registered) {
    check_blocking_allowed();
    return asio::co_spawn(asio::make_strand(backend_.get_executor()),
                          release_op(owner, std::move(rec), registered), asio::use_future)
        .get();
  }

  error_code release_blocking(const std::string& owner, const std::shared_ptr<detail::hold_record>& rec) {
    return run_release(owner, rec, true);
  }

  void release_from_destructor(const std::string& owner, std::shared_ptr<detail::hold_record> rec) noexcept {
    try {
      if (backend_.on_io_thread()) {
        asio::co_spawn(asio::make_strand(backend_.get_executor()), release_op(owner, rec, true),
                       [this, name = name_](std::exception_ptr, error_code ec) {
                         if (ec) report(ec, "release in ~Hold");
                       });
        return;
      }
      if (auto ec = run_release(owner, std::move(rec), true)) report(ec, "release in ~Hold");
    } catch (const std::exception& e) {
      report(make_error_code(error::invalid_argument), std::string("release in ~Hold: ") + e.what());
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
  std::map<std::string, std::shared_ptr<detail::hold_record>> holds_;  // by owner id
  std::function<void(std::error_code, const std::string&)> error_handler_;
};

}  // namespace dlock
