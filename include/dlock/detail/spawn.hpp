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
/// operation_aborted, a release ignores it) and waits until none runs on
/// the lock any more: an operation leaves when its coroutine ends, or, if
/// it hands the caller a hold (which refers to the lock), once the
/// caller's handler has returned.
class inflight_ops {
 public:
  inflight_ops() = default;
  // A handler that destroys its lock object: its operation's end is not told.
  ~inflight_ops() {
    if (running().ops == this) running() = {};
  }
  inflight_ops(const inflight_ops&) = delete;
  inflight_ops& operator=(const inflight_ops&) = delete;

  /// Registers an operation; `cancel` must be safe to call from any thread.
  std::uint64_t begin(std::function<void()> cancel) {
    std::lock_guard g(m_);
    ops_.emplace(++next_, std::move(cancel));
    return next_;
  }
  /// The operation no longer uses the lock (once per operation).
  void end(std::uint64_t id) {
    std::lock_guard g(m_);
    ops_.erase(id);
    idle_.notify_all();
  }
  /// Cancels every operation in flight; how many there were, but the one
  /// whose handler this thread is running.
  std::size_t cancel_all() {
    std::vector<std::function<void()>> cancels;
    std::size_t mine = 0;
    {
      std::lock_guard g(m_);
      for (auto& [id, cancel] : ops_) cancels.push_back(cancel);
      mine = own_locked();
    }
    for (auto& c : cancels) c();
    return cancels.size() - mine;
  }
  /// Blocks until no operation is in flight, but the one whose handler
  /// this thread is running (a handler may destroy the lock object).
  void wait_idle() {
    std::unique_lock g(m_);
    idle_.wait(g, [&] { return ops_.size() <= own_locked(); });
  }

  /// The operation whose handler this thread is running, if any.
  struct frame {
    inflight_ops* ops = nullptr;
    std::uint64_t id = 0;
  };
  static frame& running() {
    thread_local frame f;
    return f;
  }

 private:
  std::size_t own_locked() const { return running().ops == this && ops_.count(running().id) ? 1 : 0; }

  std::mutex m_;
  std::condition_variable idle_;
  std::map<std::uint64_t, std::function<void()>> ops_;
  std::uint64_t next_ = 0;
};

// What a tracked operation shares between its coroutine and its handler:
// whether it has left its register (then the handler must not touch it).
struct tracked_state {
  inflight_ops* ops;
  std::uint64_t id;
  std::shared_ptr<asio::cancellation_signal> signal = std::make_shared<asio::cancellation_signal>();
  bool ended = false;  // set on the operation's strand, read by its handler after
};

// The completion handler of a tracked operation: the coroutine listens to
// the state's signal (which the caller's own cancellation slot feeds, and
// ~Lock emits on). An operation that hands its caller a value (a hold)
// leaves its register only once the handler has returned.
template <class Handler, class Executor, class... T>
struct tracked_completion {
  Handler handler;
  Executor fallback;
  std::shared_ptr<tracked_state> state;

  using executor_type = asio::associated_executor_t<Handler, Executor>;
  executor_type get_executor() const noexcept { return asio::get_associated_executor(handler, fallback); }

  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return state->signal->slot(); }

  void operator()(std::exception_ptr e, std::tuple<redis::error_code, T...> result) {
    auto caller_slot = asio::get_associated_cancellation_slot(handler);
    if (caller_slot.is_connected()) caller_slot.clear();
    auto& running = inflight_ops::running();
    const auto outer = running;
    if (!state->ended) running = {state->ops, state->id};
    struct leave {
      inflight_ops::frame& running;
      inflight_ops::frame outer;
      tracked_state& state;
      ~leave() {
        // Unless it ended already, or the handler destroyed the lock object.
        if (!state.ended && running.ops == state.ops) state.ops->end(state.id);
        running = outer;
      }
    } on_exit{running, outer, *state};
    if (e) std::rethrow_exception(e);  // the coroutines report errors as values; this is a bug
    std::apply(std::move(handler), std::move(result));
  }
};

// Runs `op`, then leaves the register unless the caller is handed a value
// (a hold, which refers to the lock: the handler leaves after using it);
// leaves too if the coroutine is destroyed before it ends.
template <class... T>
asio::awaitable<std::tuple<redis::error_code, T...>> run_tracked(
    std::shared_ptr<tracked_state> state, asio::awaitable<std::tuple<redis::error_code, T...>> op) {
  struct guard {
    tracked_state& s;
    bool handed = false;  // the handler leaves
    ~guard() {
      if (!handed && !s.ended) {
        s.ended = true;
        s.ops->end(s.id);
      }
    }
  } g{*state};
  auto result = co_await std::move(op);
  g.handed = sizeof...(T) > 0 && !std::get<0>(result);
  if (!g.handed) {
    state->ended = true;
    state->ops->end(state->id);  // the lock object may be gone from here on
  }
  co_return result;
}

/// As spawn, registered in `ops` while it uses the lock (see inflight_ops):
/// cancelled by the caller's cancellation slot, as spawn's are, and by
/// ops.cancel_all(). `ex` must be a strand: every cancellation is emitted
/// there.
template <class... T, class Executor, class CompletionToken>
auto spawn_tracked(inflight_ops& ops, Executor ex, asio::awaitable<std::tuple<redis::error_code, T...>> op,
                   CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(redis::error_code, T...)>(
      [ex, &ops](auto handler, asio::awaitable<std::tuple<redis::error_code, T...>> a) {
        using handler_t = std::decay_t<decltype(handler)>;
        auto state = std::make_shared<tracked_state>(tracked_state{&ops, 0});
        auto emit_on_strand = [ex, signal = state->signal](asio::cancellation_type t) {
          asio::post(ex, [signal, t] { signal->emit(t); });
        };
        state->id = ops.begin([emit_on_strand] { emit_on_strand(asio::cancellation_type::terminal); });
        auto caller_slot = asio::get_associated_cancellation_slot(handler);
        try {
          if (caller_slot.is_connected()) caller_slot.assign(emit_on_strand);
          asio::co_spawn(ex, run_tracked<T...>(state, std::move(a)),
                         tracked_completion<handler_t, Executor, T...>{std::move(handler), ex, state});
        } catch (...) {
          if (caller_slot.is_connected()) caller_slot.clear();
          ops.end(state->id);
          throw;
        }
      },
      token, std::move(op));
}

}  // namespace dlock::detail
