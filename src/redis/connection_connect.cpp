// The multiplexed connection's way to a server: where to connect (the
// settings' address, or what an address source finds), the socket, TLS and
// the handshake, all within the connect timeout.
#include <memory>
#include <string>
#include <utility>

#include <boost/asio/steady_timer.hpp>

#include "address_lookup.hpp"
#include "connect_error.hpp"
#include "connection_impl.hpp"
#include "handshake.hpp"
#include "socket_connect.hpp"
#include "tls.hpp"
#include "tls_connect.hpp"

namespace dlock::redis::detail {

// Where to connect: the settings' address, at once; or, when the
// settings have an address source (Sentinel's), what it finds.
awaitable<std::pair<error_code, server_address>> connection_impl::resolve_address() {
  if (!cfg_.source) co_return std::pair{error_code{}, server_address::of(cfg_)};
  co_return co_await address_lookup::ask(*cfg_.source, strand_, lookup_, stopping_);
}

// Connects to `address` and runs AUTH / SELECT / CLIENT SETNAME within
// connect_timeout.
awaitable<error_code> connection_impl::connect_and_handshake(const server_address& address) {
  error_code ignored;
  socket_.close(ignored);
  session_.reset();
  incoming_.reset();

  // A watchdog closes the socket when the connect timeout passes; the
  // pending (or next) operation then fails and we report connect_timeout.
  // Its handler may run after this frame is gone (the timer fired just as
  // the handshake ended), so it shares its state by value, and `finished`
  // keeps it away from the socket of a later connection.
  struct watch_state {
    bool finished = false;
    bool timed_out = false;
  };
  auto state = std::make_shared<watch_state>();
  asio::steady_timer watchdog(strand_);
  watchdog.expires_after(cfg_.connect_timeout);
  watchdog.async_wait([self = shared_from_this(), state](error_code ec) {
    if (ec || state->finished) return;
    state->timed_out = true;
    error_code ignored2;
    self->socket_.close(ignored2);
    self->resolver_.cancel();
  });
  std::string why;
  error_code ec = co_await connect_socket(address);
  if (!ec && !stopping_ && tls_)
    ec = co_await tls_connect(session_, socket_, *tls_, address.host, &certificate_requested_, why);
  if (!ec && !stopping_) {
    bool heard = false;
    ec = co_await run_handshake(heard);
    // Under TLS 1.3 a refused client certificate is only heard here: the
    // server's alert on the first read, or (its alert lost with the
    // close) the connection ended before a byte of reply came.
    if (session_ && ec.category() == asio::error::get_ssl_category()) {
      ec = tls_failure_of(session_->native_handle(), ec, why);
    } else if (session_ && !heard && !stopping_ && !state->timed_out &&
               refused_certificate_likely(session_->native_handle(), certificate_requested_, ec)) {
      auto failure = refused_after_request(!tls_->settings.cert_file.empty());
      why = std::move(failure.why);
      ec = failure.code;
    }
  }
  state->finished = true;
  watchdog.cancel();
  if (state->timed_out) ec = error::connect_timeout;  // the socket is closed
  if (ec) socket_.close(ignored);
  {
    std::lock_guard g(failure_mutex_);
    last_failure_ = ec && !state->timed_out ? why : std::string();
  }
  co_return ec;
}

awaitable<error_code> connection_impl::connect_socket(const server_address& address) {
  return open_and_connect(socket_, resolver_, address, stopping_);
}

// `heard`: a byte of reply came.
awaitable<error_code> connection_impl::run_handshake(bool& heard) {
  const handshake greeting(cfg_);
  response replies;
  auto ec = session_ ? co_await write_and_read(*session_, incoming_, greeting.commands(), replies)
                     : co_await write_and_read(socket_, incoming_, greeting.commands(), replies);
  heard = !replies.empty() || incoming_.buffered() > 0;
  if (ec) co_return ec;
  co_return greeting.verdict(replies);
}

}  // namespace dlock::redis::detail
