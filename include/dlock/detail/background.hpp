// Work a lock object sends on after the call that started it has returned
// (a release by a destroyed hold, a waiter's retried leave), counted so
// that the lock object can wait for it, with its failures reported.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>

#include <dlock/error.hpp>

namespace dlock::detail {

/// One per lock object. `spawn` runs a task on a strand of the given
/// executor; `wait_idle` (the lock's destructor) blocks until every task has
/// ended. A task reports its own failures through `report`, which also
/// hears of a task that threw.
class background_work {
 public:
  using reporter = std::function<void(std::error_code, const std::string&)>;

  explicit background_work(reporter report) : report_(std::move(report)) {}
  background_work(const background_work&) = delete;
  background_work& operator=(const background_work&) = delete;

  /// Runs `task` on a new strand of `ex`; `what` names it if it throws.
  template <class Executor>
  void spawn(const Executor& ex, boost::asio::awaitable<void> task, std::string what) {
    {
      std::lock_guard g(m_);
      ++running_;
    }
    boost::asio::co_spawn(boost::asio::make_strand(ex), std::move(task),
                          [this, what = std::move(what)](std::exception_ptr ep) {
                            if (ep) report(make_error_code(error::unexpected_exception), what + ": " + describe(ep));
                            std::lock_guard g(m_);
                            if (--running_ == 0) idle_.notify_all();
                          });
  }

  /// Blocks until no task runs.
  void wait_idle() {
    std::unique_lock g(m_);
    idle_.wait(g, [&] { return running_ == 0; });
  }

  /// Tells the lock's error handler (the reporter must not throw: the
  /// lock's own catches what its handler throws).
  void report(std::error_code ec, const std::string& what) const noexcept { report_(ec, what); }

  /// What an exception says, for a report.
  static std::string describe(std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception not derived from std::exception";
    }
  }

 private:
  reporter report_;
  std::mutex m_;
  std::condition_variable idle_;
  int running_ = 0;
};

}  // namespace dlock::detail
