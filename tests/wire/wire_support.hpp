// Small helpers shared by the wire-layer tests: an io_context on a thread,
// and polling for a condition with a deadline.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

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

/// Polls `condition` every 20 ms until it holds or `limit` passes.
inline bool wait_until(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

}  // namespace dlock::test
