// The multiplexed connection's engine, connection_impl: one strand runs
// its run loop (connect, handshake, then a reader, a writer and a health
// check side by side). Its members are defined in connection.cpp (the run
// loop and the reader, writer and health check) and connection_connect.cpp
// (finding the server, connecting and the handshake).
#pragma once

#include <dlock/redis/connection.hpp>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/err.h>

#include "address_lookup.hpp"
#include "connect_error.hpp"
#include "handshake.hpp"
#include "health_check.hpp"
#include "reply_stream.hpp"
#include "request_queue.hpp"
#include "run_fsm.hpp"
#include "socket_connect.hpp"
#include "tls.hpp"
#include "tls_connect.hpp"

namespace dlock::redis::detail {

using asio::awaitable;
using clock = std::chrono::steady_clock;
inline constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

class connection_impl : public std::enable_shared_from_this<connection_impl> {
 public:
  connection_impl(asio::any_io_executor ex, config cfg)
      : strand_(asio::make_strand(ex)),
        cfg_(std::move(cfg)),
        socket_(strand_),
        resolver_(strand_),
        write_signal_(strand_),
        deadline_timer_(strand_),
        reconnect_timer_(strand_),
        incoming_(cfg_.limits),
        requests_(cfg_.command_timeout),
        tls_(tls_client_for(cfg_)) {}

  asio::any_io_executor executor() const noexcept { return strand_; }
  const config& settings() const noexcept { return cfg_; }

  void start() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      if (self->started_ || self->stopping_) return;
      self->started_ = true;
      asio::co_spawn(self->strand_, self->run(), asio::detached);
      asio::co_spawn(self->strand_, self->expire_loop(), asio::detached);
    });
  }

  void stop() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      if (self->stopping_) return;
      self->stopping_ = true;
      self->refusing_.store(true, std::memory_order_relaxed);  // new requests fail at once
      self->fsm_.request_stop();
      self->requests_.shut_down();
      error_code ignored;
      self->socket_.close(ignored);
      self->resolver_.cancel();
      self->write_signal_.cancel();
      self->deadline_timer_.cancel();
      self->reconnect_timer_.cancel();
      if (self->lookup_) self->lookup_->wake();
      if (!self->started_) self->requests_.fail_all(error::shutting_down, error::shutting_down);
    });
  }

  void drop() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      error_code ignored;
      self->socket_.close(ignored);
    });
  }

  // See connection::server_moved.
  void moved(address to) {
    asio::dispatch(strand_, [self = shared_from_this(), to = std::move(to)] {
      if (self->connected_) {
        if (self->serving_ == to) return;
        error_code ignored;
        self->socket_.close(ignored);
      } else {
        self->reconnect_timer_.cancel();  // a backoff wait: connect now
      }
    });
  }

  // Runs on the strand.
  void add(std::shared_ptr<exec_op> op) {
    if (requests_.add(std::move(op), clock::now()) && connected_) write_signal_.cancel();
    // No need to wake the expiry loop: it is never set later than now plus
    // one command timeout, which is this request's deadline at the earliest.
  }

  // Runs on the strand; see request_queue::cancel.
  void take_back(const std::weak_ptr<exec_op>& weak_op) { requests_.cancel(weak_op.lock()); }

  void wait_connected(std::function<void(error_code)> handler) {
    asio::dispatch(strand_, [self = shared_from_this(), h = std::move(handler)]() mutable {
      if (self->connected_) {
        asio::post(self->strand_, [h = std::move(h)] { h({}); });
      } else if (self->stopping_) {
        asio::post(self->strand_, [h = std::move(h)] { h(error::shutting_down); });
      } else {
        self->connect_waiters_.push_back(std::move(h));
      }
    });
  }

  void set_push_handler(std::function<bool(value&)> h) { push_handler_ = std::move(h); }
  void set_connect_handler(std::function<void()> h) { connect_handler_ = std::move(h); }
  script_cache& scripts() noexcept { return scripts_; }

  connection::stats statistics() const {
    return {connects_.load(), writes_.load(), commands_written_.load(), up_.load(std::memory_order_relaxed),
            refusing_.load(std::memory_order_relaxed)};
  }

  std::string last_connect_failure() const {
    std::lock_guard g(failure_mutex_);
    return last_failure_;
  }

 private:
  // The run loop: run_fsm decides each step, this performs it. Nothing may
  // end the loop but stop(): it is spawned detached, so an exception would
  // end it silently and leave every request waiting; a step that throws is
  // a failed step.
  awaitable<void> run();

  // Where to connect: the settings' address, at once; or, when the
  // settings have an address source (Sentinel's), what it finds.
  awaitable<std::pair<error_code, server_address>> resolve_address();

  // `ec` is one of dlock's connection errors; see request_queue::connect_failed.
  // A server at a fixed address (no address source: a cluster node) that
  // is not a master refuses what is queued and what comes, until the next
  // connect attempt begins: it was demoted by a failover, and waiting for
  // it would only delay the caller's move to the new master (a Sentinel
  // connection asks its sentinels again instead, so its requests wait).
  void connect_failed(error_code ec, bool give_up) {
    const bool replica_here = ec == error::not_master && !cfg_.source;
    requests_.connect_failed(ec, give_up, replica_here);
    refusing_.store(stopping_ || is_permanent(ec) || replica_here, std::memory_order_relaxed);
    notify_connect_waiters(ec);
  }

  // A connect attempt begins: see request_queue::connecting.
  void connecting() {
    requests_.connecting();
    if (!stopping_) refusing_.store(requests_.refusing(), std::memory_order_relaxed);
  }

  // Serves one connection until it breaks.
  awaitable<void> serve();

  // Closes the current connection, if any. Whatever was written and not
  // answered may or may not have run; what was not written stays queued.
  void end_connection() {
    connected_ = false;
    up_.store(false, std::memory_order_relaxed);
    error_code ignored;
    socket_.close(ignored);
    incoming_.reset();
    requests_.connection_lost();
  }

  // Each loop of a connection marks it dead as soon as it ends (return,
  // error, or the exception of a cancelled co_await), before the others
  // resume: from then on nothing is written on it, and requests that arrive
  // stay queued for the next one.
  struct end_of_connection {
    connection_impl& self;
    ~end_of_connection() { self.connected_ = false; }
  };

  // Connects to `address` and runs AUTH / SELECT / CLIENT SETNAME within
  // connect_timeout.
  awaitable<error_code> connect_and_handshake(const server_address& address);

  awaitable<error_code> connect_socket(const server_address& address);

  // `heard`: a byte of reply came.
  awaitable<error_code> run_handshake(bool& heard);

  // The connection's reads and writes: through the TLS session when there
  // is one, else on the socket.
  auto read_some(asio::mutable_buffer into) {
    return session_ ? session_->async_read_some(into, use_tuple) : socket_.async_read_some(into, use_tuple);
  }
  auto write_all(asio::const_buffer from) {
    return session_ ? asio::async_write(*session_, from, use_tuple) : asio::async_write(socket_, from, use_tuple);
  }

  awaitable<void> read_loop();

  // Routes one reply; false when the stream is out of step with our queue.
  bool deliver(value&& v);

  awaitable<void> write_loop();

  // Every interval, the health rule (see judge_health) on what the
  // connection did since.
  awaitable<void> health_loop();

  // Ends requests whose command timeout passed (see request_queue::expire).
  awaitable<void> expire_loop();

  void notify_connect_waiters(error_code ec) {
    auto waiters = std::move(connect_waiters_);
    connect_waiters_.clear();
    for (auto& w : waiters) asio::post(strand_, [w = std::move(w), ec] { w(ec); });
  }

  asio::strand<asio::any_io_executor> strand_;
  config cfg_;
  socket_type socket_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer write_signal_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer reconnect_timer_;
  reply_stream incoming_;

  request_queue requests_;
  run_fsm fsm_{cfg_.reconnect_wait, cfg_.reconnect_wait_max};  // the run loop's decisions
  std::vector<std::function<void(error_code)>> connect_waiters_;
  std::function<bool(value&)> push_handler_;
  std::function<void()> connect_handler_;
  script_cache scripts_;

  bool started_ = false;
  bool stopping_ = false;
  bool connected_ = false;
  std::atomic<bool> up_{false};  // connected_, readable from any thread (statistics)
  std::atomic<bool> refusing_{false};  // new requests fail at once (statistics): see stats::refusing
  bool demoted_ = false;  // a READONLY reply came: end once the written requests are answered
  server_address serving_;  // where the last connect went
  std::shared_ptr<address_lookup> lookup_;  // the address source's answer, while the run loop waits for it
  clock::time_point last_byte_at_{};  // for the health check
  std::atomic<std::size_t> connects_{0}, writes_{0}, commands_written_{0};

  // TLS: the settings' client (null: plain text), and the session of the
  // current connection over socket_, made anew for each connect.
  std::shared_ptr<const tls_client> tls_;
  std::optional<asio::ssl::stream<socket_type&>> session_;
  bool certificate_requested_ = false;  // the session's server asked for a client certificate
  mutable std::mutex failure_mutex_;
  std::string last_failure_;  // see connection::last_connect_failure
};

}  // namespace dlock::redis::detail
