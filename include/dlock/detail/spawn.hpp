// Runs a lock coroutine behind an Asio completion token, turning its
// `tuple<error_code, T>` result into a `void(error_code, T)` completion;
// and the register of a lock object's operations in flight.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <dlock/redis/error_code.hpp>

namespace dlock::detail {

namespace asio = boost::asio;

// The completion handler co_spawn calls: it carries the user's handler's
// executor and cancellation slot, so both reach the coroutine.
template <class Handler, class Executor, class... T>
struct spawn_completion {
  Handler handler;
  Executor fallback;

  using executor_type = asio::associated_executor_t<Handler, Executor>;
  executor_type get_executor() const noexcept { return asio::get_associated_executor(handler, fallback); }

  using cancellation_slot_type = asio::associated_cancellation_slot_t<Handler>;
  cancellation_slot_type get_cancellation_slot() const noexcept {
    return asio::get_associated_cancellation_slot(handler);
  }

  void operator()(std::exception_ptr e, std::tuple<redis::error_code, T...> result) {
    if (e) std::rethrow_exception(e);  // the coroutines report errors as values; this is a bug
    std::apply(std::move(handler), std::move(result));
  }
};

/// Starts `op` on `ex`; completes with `void(error_code, T...)`.
template <class... T, class Executor, class CompletionToken>
auto spawn(Executor ex, asio::awaitable<std::tuple<redis::error_code, T...>> op, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(redis::error_code, T...)>(
      [ex](auto handler, asio::awaitable<std::tuple<redis::error_code, T...>> a) {
        using handler_t = std::decay_t<decltype(handler)>;
        asio::co_spawn(ex, std::move(a), spawn_completion<handler_t, Executor, T...>{std::move(handler), ex});
      },
      token, std::move(op));
}

/// The async operations a lock object has in flight. Each registers how it
/// is cancelled; ~Lock cancels them all (terminal: a wait ends with
/// operation_aborted, a release ignores it) and waits until every one has
/// completed, so that none runs on after its lock object is gone.
class inflight_ops {
 public:
  inflight_ops() = default;
  // A handler that destroys its lock object: its operation's end is not told.
  ~inflight_ops() {
    if (handler_running() == this) handler_running() = nullptr;
  }
  inflight_ops(const inflight_ops&) = delete;
  inflight_ops& operator=(const inflight_ops&) = delete;

  /// Registers an operation; `cancel` must be safe to call from any thread.
  std::uint64_t begin(std::function<void()> cancel) {
    std::lock_guard g(m_);
    ops_.emplace(++next_, std::move(cancel));
    return next_;
  }
  /// The operation has completed and its handler has returned.
  void end(std::uint64_t id) {
    std::lock_guard g(m_);
    ops_.erase(id);
    if (ops_.size() <= 1) idle_.notify_all();  // wait_idle may wait for its own handler's alone
  }
  /// Cancels every operation in flight; how many there were, but the one
  /// whose handler this thread is running.
  std::size_t cancel_all() {
    std::vector<std::function<void()>> cancels;
    {
      std::lock_guard g(m_);
      for (auto& [id, cancel] : ops_) cancels.push_back(cancel);
    }
    for (auto& c : cancels) c();
    return cancels.size() - (handler_running() == this && !cancels.empty() ? 1 : 0);
  }
  /// Blocks until no operation is in flight, but the one whose handler
  /// this thread is running (a handler may destroy the lock object).
  void wait_idle() {
    const std::size_t mine = handler_running() == this ? 1 : 0;
    std::unique_lock g(m_);
    idle_.wait(g, [&] { return ops_.size() <= mine; });
  }

  /// The register whose operation's handler this thread is running, if any.
  static inflight_ops*& handler_running() {
    thread_local inflight_ops* ops = nullptr;
    return ops;
  }

 private:
  std::mutex m_;
  std::condition_variable idle_;
  std::map<std::uint64_t, std::function<void()>> ops_;
  std::uint64_t next_ = 0;
};

// The completion handler of a tracked operation: the coroutine listens to
// `signal` (which the caller's own cancellation slot feeds, and ~Lock
// emits on); the operation leaves `ops` once the caller's handler has
// returned, since a handler may still use the lock (a hold it was given).
template <class Handler, class Executor, class... T>
struct tracked_completion {
  Handler handler;
  Executor fallback;
  std::shared_ptr<asio::cancellation_signal> signal;
  inflight_ops* ops;
  std::uint64_t id;

  using executor_type = asio::associated_executor_t<Handler, Executor>;
  executor_type get_executor() const noexcept { return asio::get_associated_executor(handler, fallback); }

  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return signal->slot(); }

  void operator()(std::exception_ptr e, std::tuple<redis::error_code, T...> result) {
    auto caller_slot = asio::get_associated_cancellation_slot(handler);
    if (caller_slot.is_connected()) caller_slot.clear();
    auto& running = inflight_ops::handler_running();
    auto* outer = std::exchange(running, ops);
    struct leave {
      inflight_ops*& running;
      inflight_ops* outer;
      inflight_ops* ops;
      std::uint64_t id;
      ~leave() {
        if (running == ops) ops->end(id);  // else the handler destroyed the lock object
        running = outer;
      }
    } on_exit{running, outer, ops, id};
    if (e) std::rethrow_exception(e);  // the coroutines report errors as values; this is a bug
    std::apply(std::move(handler), std::move(result));
  }
};

/// As spawn, registered in `ops` for as long as `op` runs: cancelled by the
/// caller's cancellation slot, as spawn's are, and by ops.cancel_all().
/// `ex` must be a strand: a cancellation from cancel_all() is emitted there.
template <class... T, class Executor, class CompletionToken>
auto spawn_tracked(inflight_ops& ops, Executor ex, asio::awaitable<std::tuple<redis::error_code, T...>> op,
                   CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(redis::error_code, T...)>(
      [ex, &ops](auto handler, asio::awaitable<std::tuple<redis::error_code, T...>> a) {
        using handler_t = std::decay_t<decltype(handler)>;
        auto signal = std::make_shared<asio::cancellation_signal>();
        auto caller_slot = asio::get_associated_cancellation_slot(handler);
        if (caller_slot.is_connected())
          caller_slot.assign([signal](asio::cancellation_type t) { signal->emit(t); });
        auto id = ops.begin([ex, signal] {
          asio::post(ex, [signal] { signal->emit(asio::cancellation_type::terminal); });
        });
        asio::co_spawn(ex, std::move(a),
                       tracked_completion<handler_t, Executor, T...>{std::move(handler), ex, signal, &ops, id});
      },
      token, std::move(op));
}

}  // namespace dlock::detail
