// What a subscription is to its user: a listener for a channel's messages,
// and a handle whose end unsubscribes. Apart from the subscriber connection
// so that the backend contract can name them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::redis {

class subscription;

/// Receives each message published on its channel, and `std::nullopt` after
/// the subscriber reconnected (messages published while it was down are
/// lost, so a listener that waits for one must check again), or when
/// subscribing again after a reconnect failed (it is retried; the listener
/// hears nothing until then). Runs on the subscriber's strand: it must not
/// block; post work elsewhere. It must not throw either: an exception is
/// reported on stderr and ignored.
using listener = std::function<void(std::optional<std::string_view> message)>;

namespace detail {

/// Shared by a listener and its subscription handle: the handle's reset()
/// closes it, and the listener is not called after that. A call in
/// progress on another thread when reset() is called finishes first
/// (reset() waits for it); one in progress on the same thread (the
/// listener resets its own subscription) goes on.
struct listener_gate {
  std::recursive_mutex m;
  bool open = true;
};

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
  /// Where a listener enters an owner: makes `l` a listener that a
  /// listener_gate guards, and `done` a completion that gives the
  /// subscription it delivers that gate, so that the handle's reset() is
  /// final (see listener_gate).
  template <class Done>
  static void gate(listener& l, Done& done);
};

}  // namespace detail

namespace detail {
/// Calls `l`; an exception it throws is reported on stderr, naming
/// `channel`, and ignored (a listener runs inside a connection's read loop,
/// where it would cut every other listener off).
void call_listener(const std::string& channel, const listener& l, std::optional<std::string_view> message) noexcept;
}  // namespace detail

/// Keeps one listener registered. Move-only; destroying it (or reset())
/// removes the listener, and the last one of a channel unsubscribes it.
/// Once reset() has returned, the listener is not called again, and no
/// call of it is running on another thread (reset() waits for one to
/// return): what the listener touches may be destroyed right after. So a
/// subscription must not be reset while holding a lock that its listener
/// takes.
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
  /// it; see the class comment for a call in progress) and leaves this
  /// empty; does nothing when already empty.
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
  std::shared_ptr<detail::listener_gate> gate_;  // closed by reset()
};

inline subscription detail::subscription_owner::make_subscription(std::weak_ptr<subscription_owner> owner,
                                                                  std::string channel, std::uint64_t id) {
  return subscription(std::move(owner), std::move(channel), id);
}

template <class Done>
void detail::subscription_owner::gate(listener& l, Done& done) {
  auto g = std::make_shared<listener_gate>();
  l = [g, l = std::move(l)](std::optional<std::string_view> message) {
    std::lock_guard lock(g->m);
    if (g->open) l(message);
  };
  done = [g, d = std::move(done)](auto ec, subscription s) mutable {
    if (s.active()) s.gate_ = g;
    d(ec, std::move(s));
  };
}

inline subscription detail::subscription_owner::make_refusal(std::string server_reply) {
  subscription s;
  s.server_reply_ = std::move(server_reply);
  return s;
}

}  // namespace dlock::redis
