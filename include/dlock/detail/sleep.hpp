// A cancellable sleep for lock coroutines.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/detail/hold_record.hpp>
#include <dlock/redis/error_code.hpp>

namespace dlock::detail {

/// Sleeps until `t`; completes with operation_aborted if the operation is
/// cancelled first.
inline boost::asio::awaitable<redis::error_code> sleep_until(steady::time_point t) {
  namespace asio = boost::asio;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(t);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return ec;
}

}  // namespace dlock::detail
