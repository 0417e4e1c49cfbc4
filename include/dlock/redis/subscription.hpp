// What a subscription is to its user: a listener for a channel's messages,
// and a handle whose end unsubscribes. Apart from the subscriber connection
// so that the backend contract can name them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

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

}  // namespace dlock::redis
