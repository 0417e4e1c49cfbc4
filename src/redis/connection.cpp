// The multiplexed Redis connection: a run loop (connect, handshake, then a
// reader, a writer and a health check side by side) on one strand.
#include <dlock/redis/connection.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <exception>
#include <string_view>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace dlock::redis {
namespace detail {

using asio::awaitable;
using clock = std::chrono::steady_clock;
using socket_type = asio::generic::stream_protocol::socket;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char a = s[i];
    if (a >= 'a' && a <= 'z') a = static_cast<char>(a - 'a' + 'A');
    if (a != prefix[i]) return false;
  }
  return true;
}

// Connect errors that retrying will not fix; queued requests fail at once.
bool is_permanent(const error_code& ec) {
  return ec == error::auth_failed || ec == error::select_failed;
}

error_code map_connect_error(const error_code& ec) {
  if (ec == asio::error::connection_refused || ec == asio::error::no_such_device ||
      ec == boost::system::errc::no_such_file_or_directory)
    return error::connection_refused;
  if (ec == asio::error::host_not_found || ec == asio::error::host_not_found_try_again ||
      ec == asio::error::no_data || ec == asio::error::no_recovery)
    return error::resolve_failed;
  return ec;
}

// What a failed connect reports, to connect waiters and to requests it kept
// from being written: one of dlock's connection errors. Anything else (an
// end-of-file or reset during the handshake, an error reply to PING such as
// LOADING, an abort by drop_connection) only means "not connected".
error_code to_connect_error(const error_code& ec) {
  auto mapped = map_connect_error(ec);
  if (mapped == error::connection_refused || mapped == error::resolve_failed ||
      mapped == error::connect_timeout || is_permanent(mapped))
    return mapped;
  return error::not_connected;
}

}  // namespace

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
        parser_(cfg_.limits) {}

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
      error_code ignored;
      self->socket_.close(ignored);
      self->resolver_.cancel();
      self->write_signal_.cancel();
      self->deadline_timer_.cancel();
      self->reconnect_timer_.cancel();
      if (!self->started_) self->fail_all(error::shutting_down, error::shutting_down);
    });
  }

  void drop() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      error_code ignored;
      self->socket_.close(ignored);
    });
  }

  // Runs on the strand.
  void add(std::shared_ptr<exec_op> op) {
    if (op->state == exec_op::stage::done) return;  // cancelled on its way here
    if (stopping_) {
      op->state = exec_op::stage::done;
      op->complete(error::shutting_down, {});
      return;
    }
    if (!connected_ && is_permanent(last_connect_error_)) {
      op->state = exec_op::stage::done;
      op->complete(last_connect_error_, {});
      return;
    }
    if (op->expected == 0) {
      op->state = exec_op::stage::done;
      op->complete({}, {});
      return;
    }
    op->deadline = clock::now() + cfg_.command_timeout;
    queue_.push_back(std::move(op));
    if (connected_) write_signal_.cancel();
    // No need to wake the expiry loop: it is never set later than now plus
    // one command timeout, which is this request's deadline at the earliest.
  }

  // Runs on the strand: a cancelled request is taken back unless the writer
  // took it already (then it cannot be, and completes as usual). One that
  // has not reached add() yet is marked done, and add() drops it.
  void take_back(const std::weak_ptr<exec_op>& weak_op) {
    auto op = weak_op.lock();
    if (!op || op->state != exec_op::stage::queued) return;
    op->state = exec_op::stage::done;
    std::erase(queue_, op);
    op->complete(asio::error::operation_aborted, {});
  }

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

  void set_push_handler(std::function<void(value&&)> h) { push_handler_ = std::move(h); }
  void set_connect_handler(std::function<void()> h) { connect_handler_ = std::move(h); }

  connection::stats statistics() const {
    return {connects_.load(), writes_.load(), commands_written_.load()};
  }

 private:
  // ---- the run loop -------------------------------------------------------

  awaitable<void> run() {
    auto self = shared_from_this();
    auto backoff = cfg_.reconnect_wait;
    while (!stopping_) {
      auto wait = cfg_.reconnect_wait;
      bool thrown = false;
      // Nothing may end this loop but stop(): it is spawned detached, so an
      // exception would end it silently and leave every request waiting.
      try {
        error_code ec = co_await connect_and_handshake();
        if (stopping_) break;
        if (ec) {
          ec = to_connect_error(ec);
          last_connect_error_ = ec;
          if (is_permanent(ec)) fail_queued(ec);
          notify_connect_waiters(ec);
          wait = backoff;
          backoff = std::min(backoff * 2, cfg_.reconnect_wait_max);
        } else {
          backoff = cfg_.reconnect_wait;
          co_await serve();
        }
      } catch (...) {
        thrown = true;
      }
      if (thrown) {
        // Say, Asio refusing the endpoint, or a connect handler that threw.
        // Retrying may well throw again, so nothing waits for it.
        end_connection();
        last_connect_error_ = error::not_connected;
        fail_queued(error::not_connected);
        notify_connect_waiters(error::not_connected);
        wait = backoff;
        backoff = std::min(backoff * 2, cfg_.reconnect_wait_max);
      }
      if (stopping_) break;
      reconnect_timer_.expires_after(wait);
      co_await reconnect_timer_.async_wait(use_tuple);
    }
    end_connection();
    fail_all(error::shutting_down, error::outcome_unknown);
    notify_connect_waiters(error::shutting_down);
  }

  // Serves one connection until it breaks.
  awaitable<void> serve() {
    using namespace asio::experimental::awaitable_operators;
    last_connect_error_ = {};
    connected_ = true;
    ++connects_;
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
    error_code ignored;
    socket_.close(ignored);
    parser_.reset();
    read_buffer_.clear();
    fail_inflight(error::outcome_unknown);
  }

  // Each loop of a connection marks it dead as soon as it ends (return,
  // error, or the exception of a cancelled co_await), before the others
  // resume: from then on nothing is written on it, and requests that arrive
  // stay queued for the next one.
  struct end_of_connection {
    connection_impl& self;
    ~end_of_connection() { self.connected_ = false; }
  };

  // Connects and runs AUTH / SELECT / CLIENT SETNAME within connect_timeout.
  awaitable<error_code> connect_and_handshake() {
    error_code ignored;
    socket_.close(ignored);
    parser_.reset();
    read_buffer_.clear();

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
    error_code ec = co_await connect_socket();
    if (!ec && !stopping_) ec = co_await handshake();
    state->finished = true;
    watchdog.cancel();
    if (state->timed_out) ec = error::connect_timeout;  // the socket is closed
    if (ec) socket_.close(ignored);
    co_return ec;
  }

  awaitable<error_code> connect_socket() {
    error_code ec;
    if (cfg_.kind == config::transport::unix_socket) {
      socket_.open(asio::local::stream_protocol(), ec);
      if (ec) co_return ec;
      asio::local::stream_protocol::endpoint ep(cfg_.path);
      std::tie(ec) = co_await socket_.async_connect(ep, use_tuple);
      if (stopping_) co_return error_code(error::shutting_down);
      co_return map_connect_error(ec);
    }
    auto [rec, results] = co_await resolver_.async_resolve(
        cfg_.host, std::to_string(cfg_.port), asio::ip::resolver_base::numeric_service, use_tuple);
    // stop() closes the socket; a socket opened after that would stay open.
    if (stopping_) co_return error_code(error::shutting_down);
    if (rec) co_return map_connect_error(rec);
    ec = asio::error::host_not_found;
    for (const auto& entry : results) {
      asio::ip::tcp::endpoint tcp_ep = entry.endpoint();
      error_code oec;
      socket_.close(oec);
      socket_.open(tcp_ep.protocol() == asio::ip::tcp::v4() ? asio::generic::stream_protocol(AF_INET, IPPROTO_TCP)
                                                           : asio::generic::stream_protocol(AF_INET6, IPPROTO_TCP),
                   oec);
      if (oec) {
        ec = oec;
        continue;
      }
      std::tie(ec) = co_await socket_.async_connect(asio::generic::stream_protocol::endpoint(tcp_ep), use_tuple);
      if (stopping_) co_return error_code(error::shutting_down);
      if (!ec) {
        socket_.set_option(asio::ip::tcp::no_delay(true), oec);
        break;
      }
      if (ec == asio::error::operation_aborted) break;
    }
    co_return map_connect_error(ec);
  }

  awaitable<error_code> handshake() {
    request req;
    enum class step { auth, select, setname };
    std::vector<step> steps;
    if (!cfg_.password.empty()) {
      if (cfg_.user.empty()) req.push("AUTH", cfg_.password);
      else req.push("AUTH", cfg_.user, cfg_.password);
      steps.push_back(step::auth);
    }
    if (cfg_.database != 0) {
      req.push("SELECT", cfg_.database);
      steps.push_back(step::select);
    }
    if (!cfg_.client_name.empty()) {
      req.push("CLIENT", "SETNAME", cfg_.client_name);
      steps.push_back(step::setname);
    }
    // Always end with a PING: it proves the server answers commands, and it
    // reports NOAUTH when the server wants a password we do not have.
    req.push("PING");
    auto [wec, n] = co_await asio::async_write(socket_, asio::buffer(req.payload()), use_tuple);
    if (wec) co_return wec;
    std::vector<value> replies;
    while (replies.size() < req.size()) {
      value v;
      error_code rec = co_await read_one(v);
      if (rec) co_return rec;
      replies.push_back(std::move(v));
    }
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const value& r = replies[i];
      if (!r.is_error()) continue;
      if (i == steps.size()) {  // the PING
        if (starts_with_ci(r.str, "NOAUTH")) co_return error::auth_failed;
        co_return error::server_error;
      }
      switch (steps[i]) {
        case step::auth: co_return error::auth_failed;
        case step::select:
          if (starts_with_ci(r.str, "NOAUTH")) co_return error::auth_failed;
          co_return error::select_failed;
        case step::setname:
          if (starts_with_ci(r.str, "NOAUTH")) co_return error::auth_failed;
          break;  // an ACL may forbid CLIENT SETNAME; the name is cosmetic
      }
    }
    co_return error_code{};
  }

  // Reads until one whole reply is parsed (handshake only; the read loop
  // parses inline).
  awaitable<error_code> read_one(value& out) {
    for (;;) {
      if (!read_buffer_.empty()) {
        auto res = parser_.parse(read_buffer_);
        read_buffer_.erase(0, res.consumed);
        if (res.ec) co_return res.ec;
        if (res.reply) {
          out = std::move(*res.reply);
          co_return error_code{};
        }
      }
      char chunk[4096];
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(chunk), use_tuple);
      if (ec) co_return ec;
      read_buffer_.append(chunk, n);
    }
  }

  awaitable<void> read_loop() {
    end_of_connection guard{*this};
    std::vector<char> chunk(64 * 1024);
    for (;;) {
      // Replies left over from the handshake's read come first. One read
      // may hold thousands of small replies: parse them at an offset and
      // drop the parsed bytes once, not once per reply.
      std::size_t parsed = 0;
      while (parsed < read_buffer_.size()) {
        auto res = parser_.parse(std::string_view(read_buffer_).substr(parsed));
        parsed += res.consumed;
        if (res.ec) co_return;  // a broken stream cannot be resynchronised
        if (!res.reply) break;
        if (!deliver(std::move(*res.reply))) co_return;
      }
      read_buffer_.erase(0, parsed);
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(chunk), use_tuple);
      if (ec) co_return;
      bytes_read_ += n;
      read_buffer_.append(chunk.data(), n);
    }
  }

  // Routes one reply; false when the stream is out of step with our queue.
  bool deliver(value&& v) {
    if (push_handler_ && v.is_array() && !v.elements.empty() && v.elements[0].is_string() &&
        (v.elements[0].str == "message" || v.elements[0].str == "pmessage")) {
      push_handler_(std::move(v));
      return true;
    }
    if (inflight_.empty()) return false;  // a reply nobody asked for
    auto& op = inflight_.front();
    op->replies.push_back(std::move(v));
    if (op->replies.size() < op->expected) return true;
    auto done = std::move(op);
    inflight_.pop_front();
    if (done->state != exec_op::stage::done) {  // not already timed out
      done->state = exec_op::stage::done;
      done->complete({}, std::move(done->replies));
    }
    return true;
  }

  awaitable<void> write_loop() {
    end_of_connection guard{*this};
    std::string batch;
    std::size_t taken = 0;  // ops of `batch`: the last ones in inflight_
    for (;;) {
      // Once another loop ended, this connection takes no more requests
      // (and a co_await here would throw: the group cancelled us).
      if (stopping_ || !connected_) co_return;
      if (queue_.empty()) {
        write_signal_.expires_at(clock::time_point::max());
        co_await write_signal_.async_wait(use_tuple);
        continue;
      }
      batch.clear();
      taken = 0;
      std::size_t commands = 0;
      auto now = clock::now();
      while (!queue_.empty()) {
        auto op = std::move(queue_.front());
        queue_.pop_front();
        if (op->state != exec_op::stage::queued) continue;
        // From here on the request may reach the server: a failure is
        // outcome_unknown, never "not sent".
        op->state = exec_op::stage::written;
        op->written_at = now;
        batch += op->payload;
        commands += op->expected;
        inflight_.push_back(std::move(op));
        ++taken;
      }
      if (batch.empty()) continue;
      auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(batch), use_tuple);
      if (ec) {
        // Not one byte left: none of the batch reached the server, so it is
        // queued again (in order, at the front) for the next connection.
        if (n == 0) requeue_last(taken);
        co_return;
      }
      ++writes_;
      commands_written_ += commands;
    }
  }

  // Moves the last `count` written requests back to the front of the queue.
  void requeue_last(std::size_t count) {
    for (; count > 0 && !inflight_.empty(); --count) {
      auto op = std::move(inflight_.back());
      inflight_.pop_back();
      if (op->state != exec_op::stage::written) continue;  // timed out meanwhile
      op->state = exec_op::stage::queued;
      queue_.push_front(std::move(op));
    }
  }

  // Every interval: the connection is dead (a paused server, a half-open
  // socket) when the oldest unanswered request was written longer ago than
  // any reply may take (the command timeout, or one interval if that is
  // longer) and not one byte arrived during the last interval. A slow
  // command (a 2 s BLPOP, another client's long script) is not a dead
  // connection, and new writes do not hide an old silence. When idle,
  // send a PING so that such a connection is noticed.
  awaitable<void> health_loop() {
    end_of_connection guard{*this};
    asio::steady_timer timer(strand_);
    const auto patience = std::max(cfg_.command_timeout, cfg_.health_check_interval);
    std::size_t seen = bytes_read_;
    for (;;) {
      timer.expires_after(cfg_.health_check_interval);
      auto [ec] = co_await timer.async_wait(use_tuple);
      if (ec || stopping_ || !connected_) co_return;
      bool overdue = !inflight_.empty() && clock::now() - inflight_.front()->written_at >= patience;
      if (overdue && bytes_read_ == seen) co_return;  // silent for a whole interval
      seen = bytes_read_;
      if (inflight_.empty() && queue_.empty()) {
        request ping;
        ping.push("PING");
        auto op = std::make_shared<silent_op>();
        op->expected = 1;
        op->payload = ping.payload();
        add(std::move(op));
      }
    }
  }

  struct silent_op final : exec_op {
    void complete(error_code, response) override {}
  };

  // Completes requests whose command_timeout passed. Requests are queued in
  // order with one timeout, so the earliest deadline is always at a front,
  // and adding a request never needs to re-arm this timer.
  awaitable<void> expire_loop() {
    auto self = shared_from_this();
    while (!stopping_) {
      auto now = clock::now();
      auto next = clock::time_point::max();
      for (auto& op : inflight_) {
        if (op->state == exec_op::stage::done) continue;
        if (op->deadline > now) {
          next = std::min(next, op->deadline);
          break;
        }
        // Keep it in inflight_ so its late reply is matched and dropped.
        op->state = exec_op::stage::done;
        op->complete(error::outcome_unknown, {});
      }
      while (!queue_.empty() && (queue_.front()->state == exec_op::stage::done ||
                                 queue_.front()->deadline <= now)) {
        auto op = std::move(queue_.front());
        queue_.pop_front();
        if (op->state == exec_op::stage::done) continue;
        op->state = exec_op::stage::done;
        error_code why = last_connect_error_ && !connected_ ? last_connect_error_
                                                            : error_code(error::command_timeout);
        op->complete(why, {});
      }
      if (!queue_.empty()) next = std::min(next, queue_.front()->deadline);
      // Idle: look again one timeout from now, before any new request is due.
      next = std::min(next, now + cfg_.command_timeout);
      deadline_timer_.expires_at(next);
      co_await deadline_timer_.async_wait(use_tuple);
    }
  }

  void fail_queued(error_code ec) {
    auto queued = std::move(queue_);
    queue_.clear();
    for (auto& op : queued) {
      if (op->state == exec_op::stage::done) continue;
      op->state = exec_op::stage::done;
      op->complete(ec, {});
    }
  }

  void fail_inflight(error_code ec) {
    auto inflight = std::move(inflight_);
    inflight_.clear();
    for (auto& op : inflight) {
      if (op->state == exec_op::stage::done) continue;
      op->state = exec_op::stage::done;
      op->complete(ec, {});
    }
  }

  void fail_all(error_code queued_ec, error_code inflight_ec) {
    fail_inflight(inflight_ec);
    fail_queued(queued_ec);
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
  parser parser_;
  std::string read_buffer_;

  std::deque<std::shared_ptr<exec_op>> queue_;     // not yet written
  std::deque<std::shared_ptr<exec_op>> inflight_;  // written, awaiting replies
  std::vector<std::function<void(error_code)>> connect_waiters_;
  std::function<void(value&&)> push_handler_;
  std::function<void()> connect_handler_;

  bool started_ = false;
  bool stopping_ = false;
  bool connected_ = false;
  error_code last_connect_error_;
  std::size_t bytes_read_ = 0;
  std::atomic<std::size_t> connects_{0}, writes_{0}, commands_written_{0};
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

void connection::async_wait_connected(std::function<void(error_code)> handler) {
  impl_->wait_connected(std::move(handler));
}

void connection::set_push_handler(std::function<void(value&&)> handler) {
  impl_->set_push_handler(std::move(handler));
}

void connection::set_connect_handler(std::function<void()> handler) {
  impl_->set_connect_handler(std::move(handler));
}

connection::stats connection::statistics() const { return impl_->statistics(); }

}  // namespace dlock::redis
