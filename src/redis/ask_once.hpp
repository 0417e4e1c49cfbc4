// One question to one server on a connection of its own, within a time
// limit: how Sentinel's sentinels and a cluster's nodes are asked where the
// servers are, apart from the connections that carry commands.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <dlock/redis/config.hpp>

#include "socket_connect.hpp"
#include "tls_connect.hpp"

namespace dlock::redis::detail {

// Writes `req` to a fresh connection to `to` (over TLS with `tls`) and
// reads one reply per command.
inline asio::awaitable<std::pair<error_code, response>> exchange(socket_type& socket,
                                                                asio::ip::tcp::resolver& resolver, const address& to,
                                                                const request& req, parser_limits limits,
                                                                const tls_client* tls) {
  const bool never = false;
  if (auto ec = co_await open_and_connect(socket, resolver, to, never)) co_return std::pair{ec, response{}};
  reply_stream incoming(limits);
  response replies;
  if (!tls) {
    auto ec = co_await write_and_read(socket, incoming, req, replies);
    co_return std::pair{ec, std::move(replies)};
  }
  std::optional<asio::ssl::stream<socket_type&>> session;
  std::string why;
  auto ec = co_await tls_connect(session, socket, *tls, to.host, nullptr, why);
  if (!ec) ec = co_await write_and_read(*session, incoming, req, replies);
  if (ec.category() == asio::error::get_ssl_category()) ec = tls_failure_of(session->native_handle(), ec, why);
  co_return std::pair{ec, std::move(replies)};
}

// One question to one server on a connection of its own (over TLS with
// `tls`), within `limit` (connect_timeout when it passes). A watchdog closes the socket and
// cancels the resolver when the limit passes, so the exchange ends whatever
// step it is in (a name lookup ignores per-operation cancellation).
inline asio::awaitable<std::pair<error_code, response>> ask_once(const address& to, const request& req,
                                                                std::chrono::milliseconds limit,
                                                                parser_limits limits,
                                                                std::shared_ptr<const tls_client> tls = nullptr) {
  auto ex = co_await asio::this_coro::executor;
  struct io {
    explicit io(const asio::any_io_executor& e) : socket(e), resolver(e) {}
    socket_type socket;
    asio::ip::tcp::resolver resolver;
    bool finished = false, timed_out = false;
  };
  auto state = std::make_shared<io>(ex);
  asio::steady_timer watchdog(ex);
  watchdog.expires_after(limit);
  watchdog.async_wait([state](error_code ec) {
    if (ec || state->finished) return;
    state->timed_out = true;
    error_code ignored;
    state->socket.close(ignored);
    state->resolver.cancel();
  });
  auto outcome = co_await exchange(state->socket, state->resolver, to, req, limits, tls.get());
  state->finished = true;
  watchdog.cancel();
  if (state->timed_out) co_return std::pair{error_code(error::connect_timeout), response{}};
  co_return outcome;
}

// AUTH with `user` (when not empty) and `password`, when there is one.
inline void push_auth(request& req, const std::string& user, const std::string& password) {
  if (password.empty()) return;
  if (user.empty()) req.push("AUTH", password);
  else req.push("AUTH", user, password);
}

// A refusal of the credentials (or of their absence).
inline bool refuses_auth(const value& v) {
  return v.is_error() && (v.str.compare(0, 6, "NOAUTH") == 0 || v.str.compare(0, 9, "WRONGPASS") == 0);
}

}  // namespace dlock::redis::detail
