// A FIFO gate for lock coroutines: one owner's acquire tries and releases
// pass it one at a time, so that its hold count in Redis and in this process
// change in the same order.
#pragma once

#include <deque>
#include <memory>
#include <mutex>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace dlock::detail {

/// An asynchronous mutex with first-come, first-served hand-off. Callers are
/// coroutines running on strands; what they do inside is one short step (a
/// round trip or two), so waiting to enter cannot be cancelled.
class owner_gate {
 public:
  /// Completes once the caller is the only one inside.
  boost::asio::awaitable<void> enter() {
    namespace asio = boost::asio;
    std::shared_ptr<asio::steady_timer> turn;
    {
      std::lock_guard g(m_);
      if (!busy_) {
        busy_ = true;
        co_return;
      }
      turn = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                  asio::steady_timer::time_point::max());
      waiting_.push_back(turn);
    }
    // leave() cancels the timer through a post to this coroutine's strand,
    // which cannot run before the wait below has started.
    co_await turn->async_wait(
        asio::bind_cancellation_slot(asio::cancellation_slot(), asio::as_tuple(asio::use_awaitable)));
  }

  /// Lets the next caller in (or opens the gate).
  void leave() {
    std::shared_ptr<boost::asio::steady_timer> next;
    {
      std::lock_guard g(m_);
      if (waiting_.empty()) {
        busy_ = false;
        return;
      }
      next = std::move(waiting_.front());
      waiting_.pop_front();
    }
    boost::asio::post(next->get_executor(), [next] { next->cancel(); });
  }

 private:
  std::mutex m_;
  bool busy_ = false;
  std::deque<std::shared_ptr<boost::asio::steady_timer>> waiting_;
};

/// Leaves the gate at the end of a scope.
class gate_pass {
 public:
  explicit gate_pass(owner_gate& g) noexcept : gate_(&g) {}
  ~gate_pass() { gate_->leave(); }
  gate_pass(const gate_pass&) = delete;
  gate_pass& operator=(const gate_pass&) = delete;

 private:
  owner_gate* gate_;
};

}  // namespace dlock::detail
