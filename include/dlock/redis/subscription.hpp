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

class subscription;

namespace detail {

/// What a subscription handle unregisters from: a subscriber connection,
/// or a backend's own registry of channels over several (ClusterBackend's).
class subscription_owner {
 public:
  virtual ~subscription_owner() = default;
  /// Removes listener `id` of `channel` (the last one of a channel
  /// unsubscribes it). Called from any thread; must not throw.
  virtual void remove_listener(std::string channel, std::uint64_t id) noexcept = 0;

 protected:
  static subscription make_subscription(std::weak_ptr<subscription_owner> owner, std::string channel,
                                        std::uint64_t id);
  /// The empty subscription of a SUBSCRIBE the server refused, with its words.
  static subscription make_refusal(std::string server_reply);
};

}  // namespace detail

/// Receives each message published on its channel, and `std::nullopt` after
/// the subscriber reconnected (messages published while it was down are
/// lost, so a listener that waits for one must check again), or when
/// subscribing again after a reconnect failed (it is retried; the listener
/// hears nothing until then). Runs on the subscriber's strand: it must not
/// block; post work elsewhere. It must not throw either: an exception is
/// reported on stderr and ignored.
using listener = std::function<void(std::optional<std::string_view> message)>;

namespace detail {
/// Calls `l`; an exception it throws is reported on stderr, naming
/// `channel`, and ignored (a listener runs inside a connection's read loop,
/// where it would cut every other listener off).
void call_listener(const std::string& channel, const listener& l, std::optional<std::string_view> message) noexcept;
}  // namespace detail

/// Keeps one listener registered. Move-only; destroying it (or reset())
/// removes the listener, and the last one of a channel unsubscribes it.
class subscription {
 public:
  subscription() = default;
  ///@{
  /// Takes over `other`'s listener, leaving `other` empty (an assignment
  /// first removes this one's own).
  subscription(subscription&& other) noexcept;
  subscription& operator=(subscription&& other) noexcept;
  ///@}
  ~subscription();

  /// Removes the listener now (the last one of its channel unsubscribes
  /// it) and leaves this empty; does nothing when already empty.
  void reset() noexcept;
  /// Whether it holds a listener: false once reset or moved from, and when
  /// the subscribe failed.
  bool active() const noexcept { return !channel_.empty(); }
  const std::string& channel() const noexcept { return channel_; }  ///< empty when not active
  /// When the subscribe failed because the server refused it (an error
  /// reply, such as an ACL's NOPERM): the server's words; else empty.
  const std::string& server_reply() const noexcept { return server_reply_; }

 private:
  friend class detail::subscription_owner;
  subscription(std::weak_ptr<detail::subscription_owner> owner, std::string channel, std::uint64_t id)
      : owner_(std::move(owner)), channel_(std::move(channel)), id_(id) {}

  std::weak_ptr<detail::subscription_owner> owner_;
  std::string channel_;
  std::uint64_t id_ = 0;
  std::string server_reply_;  // a refused subscribe's words
};

inline subscription detail::subscription_owner::make_subscription(std::weak_ptr<subscription_owner> owner,
                                                                  std::string channel, std::uint64_t id) {
  return subscription(std::move(owner), std::move(channel), id);
}

inline subscription detail::subscription_owner::make_refusal(std::string server_reply) {
  subscription s;
  s.server_reply_ = std::move(server_reply);
  return s;
}

}  // namespace dlock::redis
