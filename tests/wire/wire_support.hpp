// Small helpers shared by the wire-layer tests: an io_context on a thread
// (and, from the harness, polling with a deadline).
#pragma once

#include <chrono>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

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

}  // namespace dlock::test
