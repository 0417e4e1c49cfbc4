// Small helpers shared by the wire-layer tests: an io_context on a thread,
// requests whose errors are values, and (from the harness) polling with a
// deadline.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <dlock/redis/connection.hpp>
#include <support/polling.hpp>

namespace dlock::test {

/// An io_context run by one background thread until destruction.
struct io_thread {
  boost::asio::io_context ctx{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{ctx.get_executor()};
  std::thread runner{[this] { ctx.run(); }};

  ~io_thread() {
    work.reset();
    ctx.stop();
    runner.join();
  }
};

/// Issues `req` on a connection or backend; the future holds its error code
/// (a callback, so that errors are values rather than exceptions).
template <class Link>
std::future<redis::error_code> exec_error(Link& link, redis::request req) {
  auto done = std::make_shared<std::promise<redis::error_code>>();
  auto f = done->get_future();
  link.async_exec(std::move(req), [done](redis::error_code ec, redis::response) { done->set_value(ec); });
  return f;
}

/// One command on a backend's shared connection (the backend's blocking
/// `command` uses a blocking connection of its own instead), blocking.
template <class Backend>
redis::value shared_command(Backend& backend, redis::request req, std::error_code& ec) {
  std::promise<std::pair<redis::error_code, redis::value>> done;
  backend.async_command(std::move(req),
                        [&](redis::error_code e, redis::value v) { done.set_value({e, std::move(v)}); });
  auto [e, v] = done.get_future().get();
  ec = e;
  return v;
}

template <class Backend>
redis::value shared_command(Backend& backend, redis::request req) {
  std::error_code ec;
  auto v = shared_command(backend, std::move(req), ec);
  if (ec) throw std::system_error(ec, "shared_command");
  return v;
}

/// Starts `conn` and gives how its first connect attempt ended.
inline std::future<redis::error_code> first_connect(redis::connection& conn) {
  auto connected = std::make_shared<std::promise<redis::error_code>>();
  conn.start();
  conn.async_wait_connected([connected](redis::error_code ec) { connected->set_value(ec); });
  return connected->get_future();
}

}  // namespace dlock::test
