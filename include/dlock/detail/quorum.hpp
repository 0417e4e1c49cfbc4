// The pieces of a quorum over independent servers (Redlock): what a
// backend that offers nodes gives, how a backend names the ownership
// adapter the host applies to every lock on it, and how one operation runs
// on every node at once and is gathered, with a deadline.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <dlock/detail/commands.hpp>
#include <dlock/detail/through_function.hpp>

namespace dlock::detail {

/// A backend over several independent servers that decide by majority
/// (see contract::backend_quorum).
template <class B>
concept quorum_backend = contract::backend_quorum<B>;

/// The majority of `n` nodes: n / 2 + 1.
constexpr std::size_t majority_of(std::size_t n) noexcept { return n / 2 + 1; }

/// The ownership the host runs for ownership `O` on backend `B`: `B`'s
/// `ownership_for<O>` when it names one (a quorum backend names the adapter
/// that runs O on each node and counts the votes), else `O` itself.
template <class B, class O>
struct adapted {
  using type = O;
};
template <class B, class O>
  requires requires { typename B::template ownership_for<O>; }
struct adapted<B, O> {
  using type = typename B::template ownership_for<O>;
};
template <class B, class O>
using adapted_t = typename adapted<B, O>::type;

/// The user's ownership inside what the host runs: an adapter's `inner()`,
/// or the ownership itself.
template <class H>
const auto& inner_ownership(const H& h) noexcept {
  if constexpr (requires { h.inner(); }) return h.inner();
  else return h;
}

/// Gathers one result per node, from any thread: complete with the
/// results once every node delivered, or at the deadline with those that
/// had (nullopt for the others; what they deliver later is dropped).
template <class T>
class fan_in : public std::enable_shared_from_this<fan_in<T>> {
 public:
  using results = std::vector<std::optional<T>>;

  fan_in(asio::any_io_executor ex, std::size_t n, std::function<void(results)> done)
      : strand_(asio::make_strand(std::move(ex))), timer_(strand_), out_(n), left_(n), done_(std::move(done)) {}

  /// Starts the deadline (after every node was started: a node that
  /// delivers at once may already have finished it).
  void arm(steady::time_point deadline) {
    auto self = this->shared_from_this();
    asio::post(strand_, [self, deadline] {
      if (self->finished()) return;
      self->timer_.expires_at(deadline);
      self->timer_.async_wait([self](const boost::system::error_code&) { self->finish(); });
    });
  }

  /// Node `i`'s result.
  void deliver(std::size_t i, T value) {
    bool all = false;
    {
      std::lock_guard g(m_);
      if (finished_ || out_[i]) return;
      out_[i].emplace(std::move(value));
      all = --left_ == 0;
    }
    if (all) finish();
  }

  /// A node's operation threw: the gathering completes at once, and the
  /// exception is rethrown to whoever waits (see failure()). One thrown
  /// after the gathering completed has no one to reach: it is reported on
  /// stderr (what the wait saw stands).
  void fail(std::exception_ptr e) {
    {
      std::lock_guard g(m_);
      if (finished_) {
        report_late(e);
        return;
      }
      if (!failed_) failed_ = e;
    }
    finish();
  }
  std::exception_ptr failure() const {
    std::lock_guard g(m_);
    return failed_;
  }

 private:
  static void report_late(std::exception_ptr e) noexcept {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "dlock: a node's operation threw after its vote was counted: %s\n", x.what());
    } catch (...) {
      std::fprintf(stderr, "dlock: a node's operation threw after its vote was counted\n");
    }
  }
  bool finished() const {
    std::lock_guard g(m_);
    return finished_;
  }
  void finish() {
    std::function<void(results)> done;
    results out;
    {
      std::lock_guard g(m_);
      if (finished_) return;
      finished_ = true;
      done = std::move(done_);
      out = std::move(out_);
    }
    auto self = this->shared_from_this();
    asio::post(strand_, [self] { self->timer_.cancel(); });
    done(std::move(out));
  }

  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer timer_;
  mutable std::mutex m_;
  results out_;
  std::size_t left_;
  bool finished_ = false;
  std::exception_ptr failed_;
  std::function<void(results)> done_;
};

/// Runs `make(i)` (an awaitable<T>, which must own what it uses: it may
/// outlive this call) for each of `n` nodes at once, each on a strand of
/// `ex`, and gives back
/// each node's result, or nullopt for a node that had not answered by
/// `deadline`. Its operation runs on to its end unseen (a command, once
/// queued, is never taken back; a later command on the same key reaches
/// that node after it). An exception in one is rethrown here.
template <class T, class Make>
asio::awaitable<std::vector<std::optional<T>>> on_each_node(asio::any_io_executor ex, std::size_t n,
                                                            steady::time_point deadline, Make make) {
  std::shared_ptr<fan_in<T>> gather;
  auto [out] = co_await initiate_through_function<typename fan_in<T>::results>(
      uncancellable(), ex, [&](std::function<void(typename fan_in<T>::results)> done) {
        gather = std::make_shared<fan_in<T>>(ex, n, std::move(done));
        for (std::size_t i = 0; i < n; ++i) {
          asio::co_spawn(asio::make_strand(ex), make(i), [gather, i](std::exception_ptr e, T v) {
            if (e) gather->fail(e);
            else gather->deliver(i, std::move(v));
          });
        }
        gather->arm(deadline);
      });
  if (auto e = gather->failure()) std::rethrow_exception(e);
  co_return std::move(out);
}

}  // namespace dlock::detail
