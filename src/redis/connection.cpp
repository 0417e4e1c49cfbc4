// The multiplexed Redis connection: a run loop (connect, handshake, then a
// reader, a writer and a health check side by side) on one strand. It moves
// bytes and runs timers; what they mean is decided by the sans-I/O parts:
// the request queue, the handshake and the health rule.
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

namespace dlock::redis {
namespace detail {

using asio::awaitable;
using clock = std::chrono::steady_clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

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
    return {connects_.load(), writes_.load(), commands_written_.load(), up_.load(std::memory_order_relaxed)};
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
  awaitable<void> run() {
    auto self = shared_from_this();
    server_address address;
    for (auto a = fsm_.start();;) {
      if (a.report) connect_failed(a.report, a.give_up);
      if (a.next == run_fsm::step::done) break;
      bool thrown = false;
      try {
        switch (a.next) {
          case run_fsm::step::resolve: {
            auto [ec, found] = co_await resolve_address();
            address = std::move(found);
            a = fsm_.resolved(ec);
            break;
          }
          case run_fsm::step::connect: {
            auto ec = co_await connect_and_handshake(address);
            serving_ = address;
            if (!ec && source_moved_on(cfg_, address)) {  // a failover announced meanwhile
              error_code ignored;
              socket_.close(ignored);
              ec = error::not_master;
            }
            a = fsm_.connected(ec);
            break;
          }
          case run_fsm::step::serve:
            co_await serve();
            a = fsm_.served();
            break;
          case run_fsm::step::wait:
            reconnect_timer_.expires_after(a.wait);
            co_await reconnect_timer_.async_wait(use_tuple);
            a = fsm_.waited();
            break;
          case run_fsm::step::done:
            break;
        }
      } catch (...) {
        thrown = true;
      }
      if (thrown) {
        end_connection();
        a = fsm_.threw();
      }
    }
    end_connection();
    requests_.fail_all(error::shutting_down, error::outcome_unknown);
    notify_connect_waiters(error::shutting_down);
  }

  // Where to connect: the settings' address, at once; or, when the
  // settings have an address source (Sentinel's), what it finds.
  awaitable<std::pair<error_code, server_address>> resolve_address() {
    if (!cfg_.source) co_return std::pair{error_code{}, server_address::of(cfg_)};
    co_return co_await address_lookup::ask(*cfg_.source, strand_, lookup_, stopping_);
  }

  // `ec` is one of dlock's connection errors; see request_queue::connect_failed.
  void connect_failed(error_code ec, bool give_up) {
    requests_.connect_failed(ec, give_up);
    notify_connect_waiters(ec);
  }

  // Serves one connection until it breaks.
  awaitable<void> serve() {
    using namespace asio::experimental::awaitable_operators;
    requests_.connected();
    connected_ = true;
    up_.store(true, std::memory_order_relaxed);
    demoted_ = false;
    last_byte_at_ = clock::now();  // the handshake's replies
    ++connects_;
    scripts_.clear();  // a new connection may be to a restarted server
    notify_connect_waiters({});
    if (connect_handler_) connect_handler_();
    try {
      co_await (read_loop() || write_loop() || health_loop());
    } catch (const std::exception&) {
      // A branch cancelled by the one that ended may throw; either way
      // this connection is finished.
    }
    end_connection();
  }

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
  awaitable<error_code> connect_and_handshake(const server_address& address) {
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

  awaitable<error_code> connect_socket(const server_address& address) {
    return open_and_connect(socket_, resolver_, address, stopping_);
  }

  // `heard`: a byte of reply came.
  awaitable<error_code> run_handshake(bool& heard) {
    const handshake greeting(cfg_);
    response replies;
    auto ec = session_ ? co_await write_and_read(*session_, incoming_, greeting.commands(), replies)
                       : co_await write_and_read(socket_, incoming_, greeting.commands(), replies);
    heard = !replies.empty() || incoming_.buffered() > 0;
    if (ec) co_return ec;
    co_return greeting.verdict(replies);
  }

  // The connection's reads and writes: through the TLS session when there
  // is one, else on the socket.
  auto read_some(asio::mutable_buffer into) {
    return session_ ? session_->async_read_some(into, use_tuple) : socket_.async_read_some(into, use_tuple);
  }
  auto write_all(asio::const_buffer from) {
    return session_ ? asio::async_write(*session_, from, use_tuple) : asio::async_write(socket_, from, use_tuple);
  }

  awaitable<void> read_loop() {
    end_of_connection guard{*this};
    std::vector<char> chunk(64 * 1024);
    for (;;) {
      // Replies left over from the handshake's read come first.
      for (;;) {
        auto res = incoming_.next();
        if (res.ec) co_return;  // a broken stream cannot be resynchronised
        if (!res.reply) break;
        if (!deliver(std::move(*res.reply))) co_return;
        // A demoted master: once what was written is answered, this
        // connection ends, and the next one asks where the master is.
        if (demoted_ && !requests_.oldest_unanswered()) co_return;
      }
      auto [ec, n] = co_await read_some(asio::buffer(chunk));
      if (ec) co_return;  // stream_truncated, under TLS, is a lost connection too
      last_byte_at_ = clock::now();
      incoming_.append(chunk.data(), n);
    }
  }

  // Routes one reply; false when the stream is out of step with our queue.
  bool deliver(value&& v) {
    if (push_handler_ && v.is_array() && !v.elements.empty() && v.elements[0].is_string()) {
      const auto& head = v.elements[0].str;
      if ((head == "message" || head == "pmessage" || head == "smessage" || head == "sunsubscribe") &&
          push_handler_(v))
        return true;
    }
    if (cfg_.require_master && is_readonly(v)) demoted_ = true;
    return !requests_.take_reply(std::move(v)).stray;
  }

  awaitable<void> write_loop() {
    end_of_connection guard{*this};
    request_queue::batch batch;
    for (;;) {
      // Once another loop ended, this connection takes no more requests
      // (and a co_await here would throw: the group cancelled us).
      if (stopping_ || !connected_) co_return;
      if (!requests_.has_queued() || demoted_) {  // a demoted master gets nothing more
        write_signal_.expires_at(clock::time_point::max());
        co_await write_signal_.async_wait(use_tuple);
        continue;
      }
      requests_.take_batch(clock::now(), batch);
      if (batch.payload.empty()) continue;
      // Counted first: the replies may be read before the write completes.
      ++writes_;
      commands_written_ += batch.commands;
      auto [ec, n] = co_await write_all(asio::buffer(batch.payload));
      // Not one byte left (under TLS: not one whole record, which the server
      // cannot read): no write, and the batch waits for the next connection.
      if (ec && n == 0) {
        --writes_;
        commands_written_ -= batch.commands;
        requests_.unwrite(batch);
      }
      if (ec) co_return;
    }
  }

  // Every interval, the health rule (see judge_health) on what the
  // connection did since.
  awaitable<void> health_loop() {
    end_of_connection guard{*this};
    asio::steady_timer timer(strand_);
    for (;;) {
      timer.expires_after(cfg_.health_check_interval);
      auto [ec] = co_await timer.async_wait(use_tuple);
      if (ec || stopping_ || !connected_) co_return;
      link_activity seen{requests_.oldest_unanswered(), requests_.has_queued(), last_byte_at_};
      switch (judge_health(cfg_.health_check_interval, cfg_.command_timeout, seen, clock::now())) {
        case health::dead: co_return;
        case health::ping: add(std::make_shared<health_ping>()); break;
        case health::healthy: break;
      }
    }
  }

  // Ends requests whose command timeout passed (see request_queue::expire).
  awaitable<void> expire_loop() {
    auto self = shared_from_this();
    while (!stopping_) {
      deadline_timer_.expires_at(requests_.expire(clock::now()));
      co_await deadline_timer_.async_wait(use_tuple);
    }
  }

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

void enqueue(const std::shared_ptr<connection_impl>& impl, std::shared_ptr<exec_op> op) {
  asio::dispatch(impl->executor(), [impl, op = std::move(op)]() mutable { impl->add(std::move(op)); });
}

void cancel(const std::weak_ptr<connection_impl>& impl, const std::weak_ptr<exec_op>& op) {
  auto self = impl.lock();
  if (!self) return;
  // Post, never dispatch: the emitter may be anywhere, even inside one of
  // our own completions.
  asio::post(self->executor(), [self, op] { self->take_back(op); });
}

asio::any_io_executor impl_executor(const connection_impl& impl) noexcept {
  return impl.executor();
}

}  // namespace detail

connection::connection(executor_type ex, config cfg)
    : impl_(std::make_shared<detail::connection_impl>(std::move(ex), std::move(cfg))) {}

connection::~connection() { impl_->stop(); }

connection::executor_type connection::get_executor() const noexcept { return impl_->executor(); }
const config& connection::settings() const noexcept { return impl_->settings(); }
void connection::start() { impl_->start(); }
void connection::stop() { impl_->stop(); }
void connection::drop_connection() { impl_->drop(); }
void connection::server_moved(address to) { impl_->moved(std::move(to)); }

void connection::async_wait_connected(std::function<void(error_code)> handler) {
  impl_->wait_connected(std::move(handler));
}

void connection::set_push_handler(std::function<bool(value&)> handler) {
  impl_->set_push_handler(std::move(handler));
}

void connection::set_connect_handler(std::function<void()> handler) {
  impl_->set_connect_handler(std::move(handler));
}

connection::stats connection::statistics() const { return impl_->statistics(); }
std::string connection::last_connect_failure() const { return impl_->last_connect_failure(); }
detail::script_cache& connection::scripts() noexcept { return impl_->scripts(); }

}  // namespace dlock::redis
