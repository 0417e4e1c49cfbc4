// Running a lock operation on the thread that waits for it: a blocking call
// drives its own coroutine, so no thread has to wake it when a reply comes.
#pragma once

#include <exception>
#include <optional>
#include <stdexcept>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

namespace dlock::detail {

/// This thread's own io_context, for the operations of its blocking calls
/// (and the timers of their waits). One per thread, made on first use.
inline boost::asio::io_context& caller_context() {
  thread_local boost::asio::io_context ctx(1);
  return ctx;
}

/// Whether this thread is inside run_here already (a blocking call made from
/// a handler of another one): it cannot run its context again.
inline bool running_here() { return caller_context().get_executor().running_in_this_thread(); }

/// Runs `op` to its end on this thread's context and gives its result (or
/// rethrows its exception). Completions from other threads (a pub/sub wake,
/// the owner gate's turn) are posted to this context and run here.
template <class T>
T run_here(boost::asio::awaitable<T> op) {
  auto& ctx = caller_context();
  std::optional<T> out;
  std::exception_ptr failed;
  boost::asio::co_spawn(ctx, std::move(op), [&](std::exception_ptr e, T v) {
    if (e) failed = e;
    else out.emplace(std::move(v));
  });
  ctx.restart();
  ctx.run();
  if (failed) std::rethrow_exception(failed);
  if (!out) throw std::logic_error("dlock: a blocking lock operation stopped without a result");
  return std::move(*out);
}

}  // namespace dlock::detail
