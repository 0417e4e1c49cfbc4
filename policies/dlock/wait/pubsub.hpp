// wait::PubSub: Redisson's wait: sleep until the release message or the
// holder's remaining lease, whichever comes first.
#pragma once

#include <memory>

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
/// A release message wakes one waiter of the backend, the one that has
/// waited longest, not all of them (see ext::wake_groups): one release
/// frees the lock for one client, so the others would only try in vain.
/// A wake that arrives between a try and the sleep is kept, and a waiter
/// that leaves with a wake it did not use passes it on. An uncontended
/// acquire never subscribes; the waiters of a lock in one backend share one
/// subscription on its one subscriber connection, which ends with the last
/// wait. Needs an ownership whose release publishes (ReentrantHash).
struct PubSub {
  static constexpr const char* policy_name = "pubsub";  ///< its name in Lock::combination_name()
  static constexpr bool needs_publish = true;  ///< waits for the release message: the ownership must publish one

  /// Nothing to check: no error.
  std::error_code validate() const { return {}; }

  /// One acquire's waiter: after prepare(), its place in the backend's line
  /// of waiters on the lock's release channel (ext::wake_groups).
  template <class B>
  class waiter {
   public:
    /// `channel`: where the ownership's release publishes (see
    /// ReentrantHash::channel); the rule table guarantees there is one.
    waiter(const PubSub&, B& backend, const std::string& name, const std::string& channel)
        : backend_(backend), name_(name), channel_(channel) {}

    /// Joins the line of waiters on `channel` (subscribing, if nobody in this
    /// backend is) and completes once the subscription is confirmed, so that
    /// no later release goes unheard. The first wait then returns at once: the
    /// lock is tried again before any sleep. An error ends the acquire
    /// (server_error when the server refused the SUBSCRIBE: see server_reply()).
    asio::awaitable<error_code> prepare() {
      auto ex = co_await asio::this_coro::executor;
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
      auto [ec, ticket] =
          co_await backend_.template use_service<ext::wake_groups<B>>().join(name_, channel_, wake, &refusal_);
      ticket_ = std::move(ticket);
      // A release between the first try and the subscription sent no
      // message this waiter could hear: the first wait returns at once, so
      // the host tries again before sleeping.
      state_->released = true;
      co_return ec;
    }

    /// Returns at once if a wake came (a release message, or prepare()'s own);
    /// else sleeps until one comes, until the holder's lease could end
    /// (`held_for`, when known and not negative), or until `deadline`.
    /// Completes with no error, or with operation_aborted when the acquire is
    /// cancelled during the sleep.
    asio::awaitable<error_code> wait(std::optional<milliseconds> held_for,
                                     ext::steady::time_point deadline) {
      if (woken()) co_return error_code{};
      auto until = deadline;
      if (held_for && *held_for >= milliseconds::zero())
        until = std::min(until, ext::steady::now() + *held_for);
      state_->timer.expires_at(until);
      auto [ec] = co_await state_->timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (woken()) co_return error_code{};
      if (ec == asio::error::operation_aborted) co_return ec;  // the operation was cancelled
      co_return error_code{};
    }

    /// The server's words when it refused this waiter's SUBSCRIBE.
    const std::string& server_reply() const noexcept { return refusal_; }

   private:
    // Takes the wake, if one came: the waiter tries again, and its line may
    // wake it again.
    bool woken() {
      if (!std::exchange(state_->released, false)) return false;
      if (ticket_) ticket_->consumed();
      return true;
    }

    struct signal {
      explicit signal(const asio::any_io_executor& ex) : timer(ex) {}
      asio::steady_timer timer;
      bool released = false;
    };

    B& backend_;
    std::string name_;  // the lock: its releases publish on channel_
    std::string channel_;
    std::shared_ptr<signal> state_;
    std::unique_ptr<typename ext::wake_groups<B>::ticket> ticket_;
    std::string refusal_;
  };
};

}  // namespace dlock::wait
