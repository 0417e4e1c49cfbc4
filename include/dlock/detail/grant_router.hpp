// wait::HandOff's delivery inside one backend: one subscription per grant
// channel, and each grant message (a token) routed to the waiter it names.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/detail/channel_subscriptions.hpp>

namespace dlock::detail {

namespace asio = boost::asio;
using redis::error_code;

/// One per backend (`use_service`). A Queue release publishes the token it
/// granted the lock to, with the place in the line it was granted for
/// ("<token>:<place>"); every backend subscribed to the lock's channel
/// hears it, and this service calls the one waiter registered under that
/// token (if it is in this backend). After a subscriber reconnect (messages
/// may be lost) every waiter of the channel is told to check the key.
///
/// The subscription outlives its last waiter by `linger` (wait::HandOff's
/// setting), so that a process that takes the same lock again and again
/// does not pay a SUBSCRIBE and an UNSUBSCRIBE per acquisition; and while
/// it is up, a waiter's first try can join the line at once, since a grant
/// can no longer be missed.
template <class B>
class grant_router {
 public:
  /// What a waiter is told: (true, place), its token was granted the lock
  /// for that place in the line; (false, 0), grants may have been lost
  /// (check the key). Must not block: it runs under this service's mutex on
  /// the subscriber's strand; post.
  using notify = std::function<void(bool granted, std::int64_t place)>;

 private:
  using waiters = std::map<std::string, notify, std::less<>>;  // by token
  using engine = channel_subscriptions<B, waiters>;

 public:
  /// A waiter's registration; destroying it unregisters.
  class ticket {
   public:
    ticket(grant_router* router, std::shared_ptr<typename engine::channel> c, std::string channel, std::string token,
           std::chrono::milliseconds linger)
        : router_(router), backend_(router->backend_), weak_(router->channels_.weak()), state_(std::move(c)),
          channel_(std::move(channel)), token_(std::move(token)), linger_(linger) {}
    ~ticket() { engine::leave(weak_, backend_, state_, channel_, linger_, [&](waiters& w) { w.erase(token_); }); }
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;

    /// Whether the channel's subscription is confirmed: a grant published
    /// from now on reaches this waiter.
    bool ready() const { return engine::ready_now(weak_, state_); }

    /// Completes once the subscription is confirmed (starting it if need be);
    /// `refusal` gets the server's words when it refused the subscribe.
    asio::awaitable<error_code> subscribed(std::string& refusal) {
      if (weak_.expired()) co_return make_error_code(error::not_connected);
      auto [ec, words] = co_await router_->channels_.ready(state_, channel_, asio::as_tuple(asio::use_awaitable));
      refusal = std::move(words);
      co_return ec;
    }

   private:
    grant_router* router_;
    B& backend_;
    std::weak_ptr<typename engine::shared> weak_;
    std::shared_ptr<typename engine::channel> state_;
    std::string channel_, token_;
    std::chrono::milliseconds linger_;
  };

  explicit grant_router(B& backend) : backend_(backend), channels_(backend, &route) {}
  grant_router(const grant_router&) = delete;
  grant_router& operator=(const grant_router&) = delete;

  /// Registers `token` on `channel` (where releases of lock `key` publish
  /// grants); `n` is called with each grant to it. Does not subscribe: see
  /// ticket::ready and ticket::subscribed.
  std::unique_ptr<ticket> enter(std::string_view key, const std::string& channel, const std::string& token, notify n,
                                std::chrono::milliseconds linger) {
    auto c = channels_.enter(key, channel, [&](waiters& w) { w[token] = std::move(n); });
    return std::make_unique<ticket>(this, std::move(c), channel, token, linger);
  }

  /// Waiters registered on `channel` (tests and diagnostics).
  std::size_t waiting(std::string_view channel) const { return channels_.waiting(channel); }

  /// Whether `channel` is subscribed (tests and diagnostics).
  bool subscribed(std::string_view channel) const { return channels_.subscribed(channel); }

 private:
  // A grant ("<token>:<place>") goes to the waiter it names; after a
  // reconnect every waiter checks the key.
  static void route(waiters& w, std::optional<std::string_view> message) {
    if (!message) {
      for (auto& [token, n] : w) n(false, 0);
      return;
    }
    auto colon = message->rfind(':');
    if (colon == std::string_view::npos) return;  // not a grant
    std::int64_t place = 0;
    auto digits = message->substr(colon + 1);
    if (std::from_chars(digits.data(), digits.data() + digits.size(), place).ec != std::errc{}) return;
    if (auto it = w.find(message->substr(0, colon)); it != w.end()) it->second(true, place);
  }

  B& backend_;
  engine channels_;
};

}  // namespace dlock::detail
