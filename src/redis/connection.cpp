// The multiplexed Redis connection: a run loop (connect, handshake, then a
// reader, a writer and a health check side by side) on one strand. It moves
// bytes and runs timers; what they mean is decided by the sans-I/O parts:
// the request queue, the handshake and the health rule.
#include <dlock/redis/connection.hpp>

#include <exception>
#include <memory>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "connection_impl.hpp"

namespace dlock::redis {
namespace detail {

// The run loop: run_fsm decides each step, this performs it. Nothing may
// end the loop but stop(): it is spawned detached, so an exception would
// end it silently and leave every request waiting; a step that throws is
// a failed step.
awaitable<void> connection_impl::run() {
  auto self = shared_from_this();
  server_address address;
  for (auto a = fsm_.start();;) {
    if (a.report) connect_failed(a.report, a.give_up);
    if (a.next == run_fsm::step::done) break;
    bool thrown = false;
    try {
      switch (a.next) {
        case run_fsm::step::resolve: {
          connecting();
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

// Serves one connection until it breaks.
awaitable<void> connection_impl::serve() {
  using namespace asio::experimental::awaitable_operators;
  requests_.connected();
  connected_ = true;
  up_.store(true, std::memory_order_relaxed);
  refusing_.store(stopping_, std::memory_order_relaxed);
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

awaitable<void> connection_impl::read_loop() {
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
bool connection_impl::deliver(value&& v) {
  if (push_handler_ && v.is_array() && !v.elements.empty() && v.elements[0].is_string()) {
    const auto& head = v.elements[0].str;
    if ((head == "message" || head == "pmessage" || head == "smessage" || head == "sunsubscribe") &&
        push_handler_(v))
      return true;
  }
  if (cfg_.require_master && is_readonly(v)) demoted_ = true;
  return !requests_.take_reply(std::move(v)).stray;
}

awaitable<void> connection_impl::write_loop() {
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
awaitable<void> connection_impl::health_loop() {
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
awaitable<void> connection_impl::expire_loop() {
  auto self = shared_from_this();
  while (!stopping_) {
    deadline_timer_.expires_at(requests_.expire(clock::now()));
    co_await deadline_timer_.async_wait(use_tuple);
  }
}

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
