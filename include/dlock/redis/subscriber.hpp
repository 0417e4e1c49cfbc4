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
#include <dlock/redis/subscription.hpp>

namespace dlock::redis {

namespace detail {
class subscriber_impl;
void subscribe(const std::shared_ptr<subscriber_impl>& impl, std::string channel, listener l,
               std::function<void(error_code, subscription)> done);
}

/// One subscriber connection. Thread safety: all member functions may be
/// called from any thread.
class subscriber {
 public:
  /// Runs on a strand of `ex`, with `cfg` (sharded pub/sub when
  /// cfg.sharded_pubsub); nothing happens until start(). Throws
  /// std::system_error (invalid_argument) when the TLS settings cannot be used.
  subscriber(asio::any_io_executor ex, config cfg);
  ~subscriber();
  subscriber(const subscriber&) = delete;
  subscriber& operator=(const subscriber&) = delete;

  /// Starts connecting (and reconnecting, subscribing its channels again)
  /// in the background.
  void start();
  /// Closes the connection and stops reconnecting and resubscribing; the
  /// destructor calls it.
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

  /// Sharded pub/sub (config::sharded_pubsub): called, on the subscriber's
  /// strand, when the node stops serving a channel (it dropped the
  /// subscription on its own when the channel's slot moved, or refused it
  /// with MOVED or ASK). The channel's listeners stay registered but are
  /// not subscribed on this node again: the handler's owner (ClusterBackend)
  /// subscribes them where the slot lives now. Set before the first
  /// subscription. Without a handler, a dropped channel is subscribed again
  /// here.
  void set_channel_lost_handler(std::function<void(const std::string&)> handler);

  /// The number of channels currently subscribed (for tests).
  std::size_t channel_count() const;
  /// The number of messages received on subscribed channels since the
  /// subscriber was made (for tests: who a release reaches).
  std::size_t message_count() const;
  /// The underlying connection (for tests: statistics, drop_connection).
  connection& link() noexcept;

 private:
  static asio::any_io_executor impl_executor(const detail::subscriber_impl& impl) noexcept;
  std::shared_ptr<detail::subscriber_impl> impl_;
};

}  // namespace dlock::redis
