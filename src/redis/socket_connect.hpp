// Opening the connection's socket to an address: a unix socket, or each
// address a host name resolves to in turn, until one connects; and the
// first exchange on a fresh socket (a request, then its replies).
#pragma once

#include <string>
#include <tuple>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/request.hpp>

#include "connect_error.hpp"
#include "reply_stream.hpp"
#include "run_fsm.hpp"

namespace dlock::redis::detail {

namespace asio = boost::asio;
using error_code = boost::system::error_code;
using socket_type = asio::generic::stream_protocol::socket;

// Connects `socket` to `address`; dlock's connect errors (see
// map_connect_error), or shutting_down once `stopping` is set (stop()
// closes the socket: one opened after that would stay open).
inline asio::awaitable<error_code> open_and_connect(socket_type& socket, asio::ip::tcp::resolver& resolver,
                                                   const server_address& address, const bool& stopping) {
  constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
  error_code ec;
  if (address.kind == config::transport::unix_socket) {
    socket.open(asio::local::stream_protocol(), ec);
    if (ec) co_return ec;
    std::tie(ec) = co_await socket.async_connect(asio::local::stream_protocol::endpoint(address.path), use_tuple);
    if (stopping) co_return error_code(error::shutting_down);
    co_return map_connect_error(ec);
  }
  auto [rec, results] = co_await resolver.async_resolve(address.host, std::to_string(address.port),
                                                        asio::ip::resolver_base::numeric_service, use_tuple);
  if (stopping) co_return error_code(error::shutting_down);
  if (rec) co_return map_connect_error(rec);
  ec = asio::error::host_not_found;
  for (const auto& entry : results) {
    asio::ip::tcp::endpoint tcp_ep = entry.endpoint();
    error_code oec;
    socket.close(oec);
    socket.open(tcp_ep.protocol() == asio::ip::tcp::v4() ? asio::generic::stream_protocol(AF_INET, IPPROTO_TCP)
                                                        : asio::generic::stream_protocol(AF_INET6, IPPROTO_TCP),
                oec);
    if (oec) {
      ec = oec;
      continue;
    }
    std::tie(ec) = co_await socket.async_connect(asio::generic::stream_protocol::endpoint(tcp_ep), use_tuple);
    if (stopping) co_return error_code(error::shutting_down);
    if (!ec) {
      socket.set_option(asio::ip::tcp::no_delay(true), oec);
      break;
    }
    if (ec == asio::error::operation_aborted) break;
  }
  co_return map_connect_error(ec);
}

// Writes `req` and reads one reply per command into `replies`, through
// `incoming` (which keeps what arrived after them, for the caller), on a
// socket or a TLS stream.
template <class Stream>
asio::awaitable<error_code> write_and_read(Stream& socket, reply_stream& incoming, const request& req,
                                           response& replies) {
  constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
  auto [wec, written] = co_await asio::async_write(socket, asio::buffer(req.payload()), use_tuple);
  if (wec) co_return wec;
  char chunk[4096];
  while (replies.size() < req.size()) {
    auto res = incoming.next();
    if (res.ec) co_return res.ec;
    if (res.reply) {
      replies.push_back(std::move(*res.reply));
      continue;
    }
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(chunk), use_tuple);
    if (ec) co_return ec;
    incoming.append(chunk, n);
  }
  co_return error_code{};
}

}  // namespace dlock::redis::detail
