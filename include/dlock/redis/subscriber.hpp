// Pub/sub for a whole process on one dedicated connection: every channel is
// subscribed once, shared by reference count, and restored after a reconnect.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <dlock/redis/connection.hpp>

namespace dlock::redis {

namespace detail {
class subscriber_impl;
}

/// Receives each message published on its channel, and `std::nullopt` after
/// the subscriber reconnected (messages published while it was down are
/// lost, so a listener that waits for one must check again), or when
/// subscribing again after a reconnect failed (it is retried; the listener
/// hears nothing until then). Runs on the subscriber's strand: it must not
/// block; post work elsewhere. It must not throw either: an exception is
/// reported on stderr and ignored.
using listener = std::function<void(std::optional<std::string_view> message)>;

/// Keeps one listener registered. Move-only; destroying it (or reset())
/// removes the listener, and the last one of a channel unsubscribes it.
class subscription {
 public:
  subscription() = default;
  subscription(subscription&& other) noexcept;
  subscription& operator=(subscription&& other) noexcept;
  ~subscription();

  void reset() noexcept;
  bool active() const noexcept { return !channel_.empty(); }
  const std::string& channel() const noexcept { return channel_; }

 private:
  friend class detail::subscriber_impl;
  subscription(std::weak_ptr<detail::subscriber_impl> owner, std::string channel, std::uint64_t id)
      : owner_(std::move(owner)), channel_(std::move(channel)), id_(id) {}

  std::weak_ptr<detail::subscriber_impl> owner_;
  std::string channel_;
  std::uint64_t id_ = 0;
};

namespace detail {
void subscribe(const std::shared_ptr<subscriber_impl>& impl, std::string channel, listener l,
               std::function<void(error_code, subscription)> done);
}

/// One subscriber connection. Thread safety: all member functions may be
/// called from any thread.
class subscriber {
 public:
  subscriber(asio::any_io_executor ex, config cfg);
  ~subscriber();
  subscriber(const subscriber&) = delete;
  subscriber& operator=(const subscriber&) = delete;

  void start();
  void stop();

  /// Registers `l` for `channel` and completes once the server has confirmed
  /// the subscription, so that a message published after completion is
  /// never missed.
  ///
  /// Completion signature: `void(error_code, subscription)`. On error (the
  /// connection's errors: outcome_unknown, not_connected, ...) the listener
  /// is not registered and the subscription is empty.
  /// Cancellation: not supported; the operation completes within the
  /// connection's command timeout.
  template <class CompletionToken>
  auto async_subscribe(std::string channel, listener l, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(error_code, subscription)>(
        [impl = impl_](auto handler, std::string ch, listener lis) {
          auto ex = asio::get_associated_executor(handler, impl_executor(*impl));
          struct pending {
            decltype(handler) h;
            asio::executor_work_guard<decltype(ex)> work;
          };
          auto p = std::make_shared<pending>(pending{std::move(handler), asio::make_work_guard(ex)});
          detail::subscribe(impl, std::move(ch), std::move(lis), [p](error_code ec, subscription s) {
            auto wex = p->work.get_executor();
            asio::post(wex, [p, ec, s = std::move(s)]() mutable {
              std::move(p->h)(ec, std::move(s));
              p->work.reset();
            });
          });
        },
        token, std::move(channel), std::move(l));
  }

  /// The number of channels currently subscribed (for tests).
  std::size_t channel_count() const;
  /// The underlying connection (for tests: statistics, drop_connection).
  connection& link() noexcept;

 private:
  static asio::any_io_executor impl_executor(const detail::subscriber_impl& impl) noexcept;
  std::shared_ptr<detail::subscriber_impl> impl_;
};

}  // namespace dlock::redis
