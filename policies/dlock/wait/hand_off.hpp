// wait::HandOff: wait in the lock's FIFO line until the release grants the
// lock to this waiter (with ownership::Queue).
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <dlock/concepts.hpp>
#include <dlock/detail/grant_router.hpp>

namespace dlock::wait {

/// Joins the lock's line (ownership::Queue) in the same script as a failed
/// try, and sleeps until the release hands it the lock: the grant message
/// names this waiter's token, and the acquire completes on it with no
/// command of its own. Waiters are served in the order they joined.
///
/// While it waits, the waiter's entry in the line lives `entry_ttl` (server
/// time) and is refreshed every third of it, by a try that also notices a
/// grant whose message was lost, or a lock left free by a dead holder. A
/// waiter whose process dies drops out of the line within `entry_ttl`. A
/// wait that times out or is cancelled leaves the line in the same script
/// that checks for a grant, so a grant never goes to a waiter that left (a
/// grant that came first is kept when the deadline passed, given back when
/// the wait was cancelled).
///
/// The backend's subscription to the lock's grant channel outlives its
/// last waiter by `linger`: while it is up, a waiter's first try joins the
/// line at once (a grant can no longer be missed), so a contended acquire
/// costs its try and nothing else. An uncontended acquire on a backend that
/// has not waited on this lock recently never subscribes.
struct HandOff {
  static constexpr const char* policy_name = "handoff";
  static constexpr bool needs_publish = false;
  static constexpr bool hands_off = true;

  milliseconds entry_ttl{3000};
  milliseconds linger{10000};

  HandOff() = default;
  explicit HandOff(milliseconds ttl, milliseconds linger_for = milliseconds(10000))
      : entry_ttl(ttl), linger(linger_for) {}

  /// invalid_interval unless entry_ttl >= 30 ms (a third of it is the
  /// refresh period) and linger >= 0.
  std::error_code validate() const {
    if (entry_ttl < milliseconds(30) || entry_ttl > max_lease || linger < milliseconds::zero())
      return make_error_code(error::invalid_interval);
    return {};
  }

  template <class B>
  class waiter {
   public:
    /// `channel`: where the ownership publishes grants (Queue::channel).
    waiter(const HandOff& p, B& backend, const std::string& /*name*/, const std::string& channel)
        : entry_ttl_(p.entry_ttl), linger_(p.linger), backend_(backend), channel_(channel) {}

    /// Before each try: registers this acquire's token for its grant (once)
    /// and tells the try whether to join the line: only while the grant
    /// channel is subscribed (or a grant could be missed) and the deadline
    /// has not passed (a try_lock() never queues).
    asio::awaitable<void> before_try(detail::hold_record& rec, detail::steady::time_point deadline) {
      if (!ticket_) {
        auto ex = co_await asio::this_coro::executor;
        state_ = std::make_shared<signal>(ex);
        std::weak_ptr<signal> weak = state_;
        // From the subscriber's strand to this operation's executor.
        auto notify = [weak, ex](bool granted) {
          asio::post(ex, [weak, granted] {
            if (auto s = weak.lock()) {
              (granted ? s->granted : s->check) = true;
              s->timer.cancel();
            }
          });
        };
        ticket_ = backend_.template use_service<detail::grant_router<B>>().enter(channel_, rec.owner, notify,
                                                                                linger_);
      }
      rec.queue.entry_ttl = entry_ttl_;
      rec.queue.join = detail::steady::now() < deadline && ticket_->ready();
    }

    asio::awaitable<error_code> prepare() {
      auto ec = co_await ticket_->subscribed();
      // Subscribed only now: the next try joins the line, at once.
      state_->check = true;
      co_return ec;
    }

    asio::awaitable<error_code> wait(std::optional<milliseconds> held_for, detail::steady::time_point deadline) {
      if (state_->granted || std::exchange(state_->check, false)) co_return error_code{};
      // Wake to refresh the entry, or when the holder's lease could end (a
      // dead holder's lock is handed on by the next try that sees it free).
      auto until = std::min(deadline, detail::steady::now() + entry_ttl_ / 3);
      if (held_for && *held_for >= milliseconds::zero()) until = std::min(until, detail::steady::now() + *held_for);
      state_->timer.expires_at(until);
      auto [ec] = co_await state_->timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (state_->granted || std::exchange(state_->check, false)) co_return error_code{};
      if (ec == asio::error::operation_aborted) co_return ec;  // the operation was cancelled
      co_return error_code{};
    }

    /// Whether a grant message for this waiter came (taken once).
    bool granted() { return state_ && std::exchange(state_->granted, false); }

    /// The acquire is over: no more grants for this token.
    void done() { ticket_.reset(); }

   private:
    struct signal {
      explicit signal(const asio::any_io_executor& ex) : timer(ex) {}
      asio::steady_timer timer;
      bool granted = false;  // a grant message named this token
      bool check = false;    // try again now (just subscribed, or messages may be lost)
    };

    milliseconds entry_ttl_, linger_;
    B& backend_;
    std::string channel_;
    std::shared_ptr<signal> state_;
    std::unique_ptr<typename detail::grant_router<B>::ticket> ticket_;
  };
};

}  // namespace dlock::wait
