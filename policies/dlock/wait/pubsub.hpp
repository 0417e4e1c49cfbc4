// wait::PubSub: Redisson's wait: sleep until the release message or the
// holder's remaining lease, whichever comes first; with an ownership that
// names waiters, the release wakes one waiter across all clients.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <dlock/ext/waiting.hpp>

namespace dlock::wait {

/// After a failed try, joins the lock's line of waiters in this backend
/// (subscribed to its release channel) and tries again at once (so a
/// release before the subscription is not missed); then after each failed
/// try sleeps until it is woken, the holder's lease (the PTTL the try
/// returned) runs out, or the caller's deadline passes.
///
/// Who wakes (see ext::wake_groups): with an ownership that names waiters
/// (ReentrantHash), a failed try puts this waiter's number in the lock's
/// line in Redis, and the release publishes the first number there, on
/// the channel of that waiter's backend alone: one waiter tries, and one
/// client hears it, across all clients. A release that names nobody (or
/// Redisson's) wakes one waiter per client, the one that has waited
/// longest. A wake that arrives between a try and the sleep is kept; a
/// waiter that gives up takes its number out of the line, and passes on a
/// wake it did not use.
///
/// The subscription is shared by the backend's waiters on the lock and
/// outlives the last of them by `linger`: while it is up, a waiter's first
/// try registers its number, and a failed first try needs no second one.
/// An uncontended acquire never subscribes, and a try with no time to wait
/// (try_lock) never registers. A wake lost with a waiter that died after
/// it was named is recovered by `recheck`: the first waiter of each backend
/// never sleeps longer than that, even when the holder's lease is longer or
/// the key has no expiry (when the first leaves, the next one's sleep is
/// bounded from then on). Each backend with waiters thus tries the lock at
/// least once per `recheck` while it is held.
///
/// Needs an ownership whose release publishes (ReentrantHash).
struct PubSub {
  static constexpr const char* policy_name = "pubsub";  ///< its name in Lock::combination_name()
  static constexpr bool needs_publish = true;  ///< waits for the release message: the ownership must publish one

  /// How long the release channel's subscription outlives the backend's
  /// last waiter on the lock (2 s; 0: it ends with the last waiter).
  milliseconds linger{2000};
  /// The longest the first waiter of each backend sleeps between two tries
  /// (5 s), whatever the holder's lease: the bound on a lost wake-up.
  milliseconds recheck{5000};

  /// invalid_interval unless linger >= 0 and recheck > 0.
  std::error_code validate() const {
    if (linger < milliseconds::zero()) return make_error_code(error::invalid_interval);
    return ext::validate_positive(recheck, error::invalid_interval);
  }

  /// One acquire's waiter: after prepare() (or, when the backend is
  /// subscribed already, from its first try), its place in the backend's
  /// line of waiters on the lock's release channel (ext::wake_groups).
  template <class B>
  class waiter {
   public:
    /// `channel`: where the ownership's release publishes (see
    /// ReentrantHash::channel); the rule table guarantees there is one.
    waiter(const PubSub& p, B& backend, const std::string& name, const std::string& channel)
        : linger_(p.linger), recheck_(p.recheck), backend_(backend), name_(name), channel_(channel) {}

    /// Before each try, for an ownership that names waiters: whether the
    /// try registers this waiter's number. A first try registers only when
    /// the backend is subscribed to the channel already (it then joins the
    /// line at once): a release after the try is then heard.
    template <class O>
    asio::awaitable<void> before_try(const O&, ext::record_of<O>& rec, ext::steady::time_point deadline) {
      if constexpr (ext::names_waiters<O>) {
        using mode = ext::named_waiter::join_mode;
        rec.state.mode = mode::none;
        if (deadline <= ext::steady::now()) co_return;  // no time to wait: a try that registers nothing
        if (!ticket_ && groups().subscribed(channel_)) {
          start(co_await asio::this_coro::executor);
          // Subscribed still? (The linger may have ended it meanwhile, on
          // another thread: then prepare() subscribes and tries again.)
          early_ = ticket_->subscribed();
        }
        if (ticket_ && (early_ || prepared_)) {
          rec.state.number = number_;
          rec.state.mode = registered_ ? mode::rejoin : mode::join;
          registered_ = true;  // from this try on, the number may be in the line
        }
      }
      co_return;
    }

    /// After each try: a failed rejoin try that appended the number (a
    /// release had taken it) is in the line again even if that release's
    /// wake, naming it, comes later.
    template <class O>
    void after_try(const O&, const std::shared_ptr<ext::record_of<O>>& rec, const attempt& at) {
      if constexpr (ext::names_waiters<O>)
        back_in_line_ = !at.acquired && rec->state.mode == ext::named_waiter::join_mode::rejoin && rec->state.appended;
    }

    /// Joins the line of waiters on `channel` (subscribing, if nobody in this
    /// backend is) and completes once the subscription is confirmed, so that
    /// no later release goes unheard. Unless the waiter joined before its
    /// first try (the subscription was up), the first wait then returns at
    /// once: the lock is tried again before any sleep. An error ends the
    /// acquire (server_error when the server refused the SUBSCRIBE: see
    /// server_reply()).
    asio::awaitable<error_code> prepare() {
      if (!ticket_) start(co_await asio::this_coro::executor);
      auto [ec, words] = co_await ticket_->ready();
      refusal_ = std::move(words);
      if (ec) {
        ticket_.reset();
        co_return ec;
      }
      prepared_ = true;
      // A release between the first try and the subscription sent no
      // message this waiter could hear.
      if (!early_) state_->released = true;
      co_return error_code{};
    }

    /// Returns at once if a wake came (a release message, or prepare()'s own);
    /// else sleeps until one comes, until the holder's lease could end
    /// (`held_for`, when known and not negative), until `deadline`, or, for
    /// the backend's first waiter, until `recheck` has passed. Completes with
    /// no error, or with operation_aborted when the acquire is cancelled
    /// during the sleep.
    asio::awaitable<error_code> wait(std::optional<milliseconds> held_for,
                                     ext::steady::time_point deadline) {
      if (woken()) co_return error_code{};
      const auto began = ext::steady::now();
      auto until = deadline;
      if (held_for && *held_for >= milliseconds::zero()) until = std::min(until, began + *held_for);
      for (;;) {
        state_->rearm = false;
        state_->timer.expires_at(ticket_->first() ? std::min(until, began + recheck_) : until);
        auto [ec] = co_await state_->timer.async_wait(asio::as_tuple(asio::use_awaitable));
        if (woken()) co_return error_code{};
        if (ec != asio::error::operation_aborted) co_return error_code{};
        auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none || !state_->rearm) co_return ec;  // the operation was cancelled
        // It became the first of its line: the re-check bounds its sleep now.
      }
    }

    /// The acquire ends without the lock: a waiter whose number may be in
    /// the lock's line takes it out, and one that was named for a wake it
    /// did not use passes the turn on (the ownership's forget_waiter). If
    /// that script fails, the number stays until a release takes it, and
    /// that release's wake is recovered by the others' `recheck`: nothing
    /// is lost but time, so the error ends here.
    template <class O>
    asio::awaitable<bool> leave(const O& o, const std::shared_ptr<ext::record_of<O>>& rec, ext::background&) {
      if constexpr (ext::names_waiters<O>) {
        auto [owed, named] = ticket_ ? ticket_->owed() : std::pair{false, false};
        if (registered_ || (owed && named)) {
          rec->state.number = number_;
          co_await o.forget_waiter(backend_, *rec, owed && named);
        }
      }
      done();
      co_return false;
    }

    /// The acquire is over: out of the line (an unnamed wake it did not use
    /// goes to the backend's next waiter).
    void done() {
      ticket_.reset();
      registered_ = false;
    }

    /// The server's words when it refused this waiter's SUBSCRIBE.
    const std::string& server_reply() const noexcept { return refusal_; }

   private:
    using groups_type = ext::wake_groups<B>;

    groups_type& groups() { return backend_.template use_service<groups_type>(); }

    // Enters the line (no I/O), woken on `ex`, the operation's executor.
    void start(const asio::any_io_executor& ex) {
      state_ = std::make_shared<signal>(ex);
      std::weak_ptr<signal> weak = state_;
      // The wake comes from the subscriber's strand (or a leaving waiter);
      // the flag and the timer belong to this operation's strand.
      auto wake = [weak, ex] {
        asio::post(ex, [weak] {
          if (auto s = weak.lock()) {
            s->released = true;
            s->timer.cancel();
          }
        });
      };
      auto nudge = [weak, ex] {
        asio::post(ex, [weak] {
          if (auto s = weak.lock()) {
            s->rearm = true;
            s->timer.cancel();
          }
        });
      };
      ticket_ = groups().enter(name_, channel_, wake, linger_, nudge);
      number_ = ticket_->entry();
    }

    // Takes the wake, if one came: the waiter tries again, and its line may
    // wake it again. A wake that named it took its number out of the line.
    bool woken() {
      if (!std::exchange(state_->released, false)) return false;
      // A wake that named it took its number out of the line, unless a try
      // put it back after that (back_in_line_).
      if (ticket_ && ticket_->consumed() && !std::exchange(back_in_line_, false)) registered_ = false;
      return true;
    }

    struct signal {
      explicit signal(const asio::any_io_executor& ex) : timer(ex) {}
      asio::steady_timer timer;
      bool released = false;
      bool rearm = false;  // it became the first of its line: re-arm the timer
    };

    milliseconds linger_, recheck_;
    B& backend_;
    std::string name_;  // the lock: its releases publish on channel_
    std::string channel_;
    std::shared_ptr<signal> state_;
    std::unique_ptr<typename groups_type::ticket> ticket_;
    std::string number_;       // its entry in the lock's line (ticket::entry), once it has a ticket
    bool early_ = false;       // joined before its first try (the subscription was up)
    bool prepared_ = false;    // subscribed by prepare()
    bool registered_ = false;  // its number may be in the lock's line
    bool back_in_line_ = false;  // the last try appended its number again (see after_try)
    std::string refusal_;
  };
};

}  // namespace dlock::wait
