// A release that waits for a connection no longer than the hold's lease.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <optional>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/error.hpp>
#include <dlock/types.hpp>

namespace dlock::detail {

/// A backend with one shared connection whose state it can tell
/// (RedisBackend, SentinelBackend).
template <class B>
concept reports_connection = requires(B& b) {
  { b.connection().statistics().refusing } -> std::convertible_to<bool>;
  { b.connection().settings().command_timeout } -> std::convertible_to<std::chrono::milliseconds>;
};

/// Whether a release on `backend` would wait for its shared connection:
/// that connection is down (neither up, nor refusing requests for good, nor
/// stopped), and this is not a blocking caller whose own connection is
/// usable or can connect now (its release goes out there; a closed one is
/// opened here, as the send would, within its connect timeout and not
/// before its own backoff has passed).
template <class B>
bool release_would_queue(B& backend) {
  const auto st = backend.connection().statistics();
  if (st.up || st.refusing) return false;
  if constexpr (requires { backend.blocking_here(); }) {
    if (auto* own = backend.blocking_here()) {
      if (own->is_open()) (void)own->check_idle();  // closes it if the server has
      if (own->connect_now()) return false;
    }
  }
  return true;
}

/// The ownership's release of `rec`. On a backend whose connection is
/// down, the release would wait in that connection's queue for the whole
/// command timeout, although the hold's lease ends sooner and frees the
/// lock by itself. So, when the hold's loss deadline comes before one
/// command timeout from now, it first waits for a connection (looking
/// every 10 ms), no longer than that deadline; if none came by then (or the
/// deadline had passed already), the hold is marked lost and the release
/// fails with not_connected, having sent nothing (a retry is safe; a key
/// the server still has, say one that a renewal extended without our
/// hearing, is released by that retry or ends with its lease). Once a
/// connection is up, or the shared one refuses for good (a wrong password:
/// the release fails at once with that error) or is stopped, the release
/// goes as before; a release once written waits for its answer as before.
template <class O, class B, class R>
boost::asio::awaitable<std::pair<error_code, release_outcome>> release_until_lease_end(const O& ownership, B& backend,
                                                                                     R& rec) {
  namespace asio = boost::asio;
  if constexpr (reports_connection<B>) {
    const auto until = rec.loss_deadline();
    if (until != steady::time_point::max() && until < steady::now() + backend.connection().settings().command_timeout) {
      std::optional<asio::steady_timer> poll;
      while (release_would_queue(backend)) {
        const auto at = steady::now();
        if (at >= until) {
          rec.expire_if_due(at);  // no renewal may start again after this
          co_return std::pair{make_error_code(error::not_connected), release_outcome::lease_lost};
        }
        if (!poll) poll.emplace(co_await asio::this_coro::executor);
        poll->expires_at(std::min(until, at + std::chrono::milliseconds(10)));
        co_await poll->async_wait(asio::as_tuple(asio::use_awaitable));
      }
    }
  }
  co_return co_await ownership.release(backend, rec);
}

}  // namespace dlock::detail
