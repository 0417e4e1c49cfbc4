// Helpers for lock tests: each combination built with test-friendly policy
// values (short spins and leases), and a child process that holds locks.
// (The private server and backend they run against: support/server_fixture.hpp.)
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <thread>
#include <type_traits>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/child_process.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

#include "lock_instances.hpp"  // every combination on RedisBackend, compiled once

namespace dlock::test {

using namespace std::chrono_literals;

/// The code and message of the std::system_error that `f()` throws, or none.
template <class F>
std::pair<std::error_code, std::string> thrown_error(F&& f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return {e.code(), e.what()};
  }
  return {};
}

/// The error code of the std::system_error that `make()` throws, or none.
template <class F>
std::error_code thrown_by(F&& make) {
  return thrown_error(std::forward<F>(make)).first;
}

/// The policy values the tests use for a lock type: the defaults, except
/// short waits (so that 8 contending threads finish quickly) and a lease
/// chosen by the test.
template <class L>
typename L::renewal_type test_renewal(std::chrono::milliseconds lease) {
  using R = typename L::renewal_type;
  if constexpr (!R::expires) return R{};
  else return R{lease};
}

template <class L>
typename L::wait_type test_wait() {
  using W = typename L::wait_type;
  if constexpr (std::is_same_v<W, wait::Spin>) return W{2ms};
  else if constexpr (std::is_same_v<W, wait::Backoff>) return W{1ms, 16ms};
  else return W{};
}

template <class L>
std::unique_ptr<L> make_lock(typename L::backend_type& backend, std::string name,
                             std::chrono::milliseconds lease = scaled(10s),
                             typename L::ownership_type ownership = {}) {
  return std::make_unique<L>(backend, std::move(name), std::move(ownership), test_renewal<L>(lease),
                             test_wait<L>());
}

/// Takes `lock` within `limit`, polling a try-once lock as its callers
/// would; empty when it was not taken in time, or a try failed.
template <class L>
std::optional<typename L::hold_type> take_within(L& lock, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::error_code ec;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto hold = lock.try_acquire_for(left, ec);
    if (hold || ec != error::not_acquired || left <= 0ms) return hold;
    std::this_thread::sleep_for(2ms);
  }
}

/// Whether a lock of type L has a lease (so that a crashed holder's lock frees).
template <class L>
constexpr bool has_lease = L::renewal_type::expires;

/// Takes the lock through the std interface (retrying by hand for TryOnce),
/// then increments `counter` the unsafe way, GET then SET, and unlocks.
/// Returns the unlock error, if any.
template <class L>
std::error_code increment_under(L& lock, RedisBackend& redis, const std::string& counter) {
  if constexpr (std::is_same_v<typename L::wait_type, wait::TryOnce>) {
    while (!lock.try_lock()) std::this_thread::sleep_for(1ms);
  } else {
    lock.lock();
  }
  auto v = redis.command(redis::request().push("GET", counter));
  long long n = v.is_null() ? 0 : std::stoll(v.str);
  redis.command(redis::request().push("SET", counter, n + 1));
  std::error_code ec;
  lock.unlock(ec);
  return ec;
}

/// The error an asynchronous operation completed with, from its
/// `use_future` future (an empty code when it succeeded).
template <class T>
std::error_code error_of(std::future<T> f) {
  try {
    f.get();
  } catch (const boost::system::system_error& e) {  // what Asio's completions throw
    return e.code();
  } catch (const std::system_error& e) {
    return e.code();
  }
  return {};
}

/// The std::system_error code that constructing a lock of type L on
/// `backend` with `renewal` (and a 10 ms Spin) throws, or none.
template <class L, class B>
std::error_code construction_error(B& backend, typename L::renewal_type renewal) {
  try {
    L lock(backend, "limits", {}, std::move(renewal), dlock::wait::Spin{std::chrono::milliseconds(10)});
  } catch (const std::system_error& e) {
    return e.code();
  }
  return {};
}

/// The lock_worker program built beside the tests.
std::string worker_path();

/// A running lock_worker (or another program's) process; killed (SIGKILL)
/// and reaped on destruction.
class worker : public child_process {
 public:
  /// Runs lock_worker with `args`.
  explicit worker(const std::vector<std::string>& args) : child_process(worker_path(), args) {}
  /// Runs `program` (a path) with `args`.
  worker(std::string program, const std::vector<std::string>& args) : child_process(std::move(program), args) {}
};

/// What a crowd of lock_worker processes did: the holds they printed, and
/// how many of them did not end well (no "done", a non-zero exit, or more
/// than the time limit), with the output of those.
struct crowd_result {
  hold_history history;
  int failed = 0;
  std::string failures;
};

/// Runs one lock_worker per argument list, all at once, and collects the
/// "hold" lines (support/hold_history.hpp) each prints before "done"; each
/// process is given `limit`.
crowd_result run_crowd(const std::vector<std::vector<std::string>>& runs, std::chrono::milliseconds limit);

}  // namespace dlock::test
