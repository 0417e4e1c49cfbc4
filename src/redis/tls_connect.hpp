// The TLS step of a connect, shared by the multiplexed connection and the
// one-question connections: a fresh session on a connected socket, its
// handshake, and what a failure means.
#pragma once

#include <optional>
#include <string>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <openssl/err.h>

#include <dlock/error.hpp>

#include "tls.hpp"

namespace dlock::redis::detail {

// dlock's error for a TLS-layer failure `ec` of the session `ssl` while
// connecting; `why` gets OpenSSL's words.
inline boost::system::error_code tls_failure_of(SSL* ssl, const boost::system::error_code& ec, std::string& why) {
  const bool openssl = ec.category() == boost::asio::error::get_ssl_category();
  auto failure = read_tls_failure(ssl, openssl ? static_cast<unsigned long>(ec.value()) : 0);
  why = std::move(failure.why);
  return failure.code;
}

// Makes `session` anew over the connected `socket` (never one reused from
// an earlier connection) and runs its handshake with `host` as the name to
// check (unless the settings name another). `requested`, when given, is
// set if the server asks for a client certificate. On failure, dlock's
// error, and OpenSSL's words in `why`.
template <class Socket>
boost::asio::awaitable<boost::system::error_code> tls_connect(
    std::optional<boost::asio::ssl::stream<Socket&>>& session, Socket& socket, const tls_client& tls,
    const std::string& host, bool* requested, std::string& why) {
  namespace asio = boost::asio;
  session.emplace(socket, *tls.context);
  if (requested) watch_certificate_request(session->native_handle(), requested);
  if (!prepare_tls_session(session->native_handle(), tls.settings, host)) {
    why = "OpenSSL refused the server name \"" + (tls.settings.server_name.empty() ? host : tls.settings.server_name) +
          "\"";
    ::ERR_clear_error();
    co_return boost::system::error_code(error::tls_handshake_failed);
  }
  auto [ec] = co_await session->async_handshake(asio::ssl::stream_base::client, asio::as_tuple(asio::use_awaitable));
  // An end of stream in the handshake is the server refusing to go on.
  if (ec && (is_tls_layer_error(ec) || ec == asio::error::eof)) co_return tls_failure_of(session->native_handle(), ec, why);
  co_return ec;
}

}  // namespace dlock::redis::detail
