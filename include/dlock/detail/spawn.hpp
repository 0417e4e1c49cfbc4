// Runs a lock coroutine behind an Asio completion token, turning its
// `tuple<error_code, T>` result into a `void(error_code, T)` completion.
#pragma once

#include <exception>
#include <tuple>
#include <utility>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>

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

}  // namespace dlock::detail
