// wait::HandOff's delivery inside one backend: one subscription per grant
// channel, and each grant message (a token) routed to the waiter it names.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/subscriber.hpp>

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
  struct channel_state {
    std::map<std::string, notify, std::less<>> waiters;  // by token
    redis::subscription sub;
    bool ready = false, subscribing = false;
    std::vector<std::function<void(error_code)>> joining;  // waiting for `sub`
    std::uint64_t idle_epoch = 0;  // bumped whenever the waiter count leaves zero
  };
  struct shared {
    std::mutex m;
    std::map<std::string, std::shared_ptr<channel_state>, std::less<>> channels;
  };

 public:
  /// A waiter's registration; destroying it unregisters.
  class ticket {
   public:
    ticket(grant_router* router, std::shared_ptr<channel_state> c, std::string channel, std::string token,
           std::chrono::milliseconds linger)
        : router_(router), weak_(router->shared_), state_(std::move(c)), channel_(std::move(channel)),
          token_(std::move(token)), linger_(linger) {}
    ~ticket() { leave(); }
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;

    /// Whether the channel's subscription is confirmed: a grant published
    /// from now on reaches this waiter.
    bool ready() const {
      auto s = weak_.lock();
      if (!s) return false;
      std::lock_guard g(s->m);
      return state_->ready;
    }

    /// Completes once the subscription is confirmed (starting it if need be).
    asio::awaitable<error_code> subscribed() {
      auto s = weak_.lock();
      if (!s) co_return make_error_code(error::not_connected);
      auto [ec] = co_await router_->ready(state_, channel_, asio::as_tuple(asio::use_awaitable));
      co_return ec;
    }

   private:
    void leave() {
      auto s = weak_.lock();
      if (!s) return;
      bool idle = false;
      std::uint64_t epoch = 0;
      {
        std::lock_guard g(s->m);
        state_->waiters.erase(token_);
        idle = state_->waiters.empty();
        epoch = state_->idle_epoch;
      }
      if (idle) router_->retire_later(state_, channel_, epoch, linger_);
    }

    grant_router* router_;
    std::weak_ptr<shared> weak_;
    std::shared_ptr<channel_state> state_;
    std::string channel_, token_;
    std::chrono::milliseconds linger_;
  };

  explicit grant_router(B& backend) : backend_(backend), shared_(std::make_shared<shared>()) {}

  ~grant_router() {
    std::map<std::string, std::shared_ptr<channel_state>, std::less<>> channels;
    {
      std::lock_guard g(shared_->m);
      channels.swap(shared_->channels);
    }
    // Their subscriptions end here, outside the mutex.
  }
  grant_router(const grant_router&) = delete;
  grant_router& operator=(const grant_router&) = delete;

  /// Registers `token` on `channel`; `n` is called with each grant to it.
  /// Does not subscribe: see ticket::ready and ticket::subscribed.
  std::unique_ptr<ticket> enter(const std::string& channel, const std::string& token, notify n,
                                std::chrono::milliseconds linger) {
    std::shared_ptr<channel_state> c;
    {
      std::lock_guard g(shared_->m);
      auto& slot = shared_->channels[channel];
      if (!slot) slot = std::make_shared<channel_state>();
      c = slot;
      if (c->waiters.empty()) ++c->idle_epoch;  // cancels a pending retirement
      c->waiters[token] = std::move(n);
    }
    return std::make_unique<ticket>(this, std::move(c), channel, token, linger);
  }

  /// Waiters registered on `channel` (tests and diagnostics).
  std::size_t waiting(std::string_view channel) const {
    std::lock_guard g(shared_->m);
    auto it = shared_->channels.find(channel);
    return it == shared_->channels.end() ? 0 : it->second->waiters.size();
  }

  /// Whether `channel` is subscribed (tests and diagnostics).
  bool subscribed(std::string_view channel) const {
    std::lock_guard g(shared_->m);
    auto it = shared_->channels.find(channel);
    return it != shared_->channels.end() && it->second->ready;
  }

 private:
  // After `linger`, unsubscribes `c` if no waiter came meanwhile.
  void retire_later(const std::shared_ptr<channel_state>& c, const std::string& channel, std::uint64_t epoch,
                    std::chrono::milliseconds linger) {
    auto timer = std::make_shared<asio::steady_timer>(backend_.get_executor(), linger);
    std::weak_ptr<shared> weak = shared_;
    timer->async_wait([timer, weak, c, channel, epoch](const error_code&) {
      auto s = weak.lock();
      if (!s) return;
      redis::subscription last;  // unsubscribed outside the mutex
      {
        std::lock_guard g(s->m);
        if (!c->waiters.empty() || c->idle_epoch != epoch || c->subscribing) return;
        last = std::move(c->sub);
        c->ready = false;
        if (auto it = s->channels.find(channel); it != s->channels.end() && it->second == c) s->channels.erase(it);
      }
    });
  }

  template <class CompletionToken>
  auto ready(const std::shared_ptr<channel_state>& c, const std::string& channel, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(error_code)>(
        [this, c, channel](auto handler) {
          auto ex = asio::get_associated_executor(handler, backend_.get_executor());
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          auto complete = [h, ex](error_code ec) { asio::post(ex, [h, ec] { std::move (*h)(ec); }); };
          bool start = false;
          {
            std::lock_guard lk(shared_->m);
            if (c->ready) {
              complete(error_code{});
              return;
            }
            c->joining.push_back(complete);
            start = !std::exchange(c->subscribing, true);
          }
          if (start) subscribe(c, channel);
        },
        token);
  }

  void subscribe(const std::shared_ptr<channel_state>& c, const std::string& channel) {
    std::weak_ptr<shared> weak = shared_;
    std::weak_ptr<channel_state> weak_c = c;
    auto listener = [weak, weak_c](std::optional<std::string_view> message) {
      auto s = weak.lock();
      auto c = weak_c.lock();
      if (!s || !c) return;
      std::lock_guard lk(s->m);
      if (message) {
        auto colon = message->rfind(':');
        if (colon == std::string_view::npos) return;  // not a grant
        std::int64_t place = 0;
        auto digits = message->substr(colon + 1);
        if (std::from_chars(digits.data(), digits.data() + digits.size(), place).ec != std::errc{}) return;
        if (auto it = c->waiters.find(message->substr(0, colon)); it != c->waiters.end()) it->second(true, place);
      } else {  // reconnected: grants may be lost; everyone checks
        for (auto& [token, n] : c->waiters) n(false, 0);
      }
    };
    backend_.async_subscribe(channel, std::move(listener), [weak, c, channel](error_code ec, redis::subscription sub) {
      auto s = weak.lock();
      if (!s) return;
      std::vector<std::function<void(error_code)>> joining;
      redis::subscription unused;  // unsubscribed outside the mutex
      {
        std::lock_guard lk(s->m);
        c->subscribing = false;
        joining.swap(c->joining);
        if (!ec) {
          if (c->waiters.empty()) {  // everyone left meanwhile
            unused = std::move(sub);
            if (auto it = s->channels.find(channel); it != s->channels.end() && it->second == c) s->channels.erase(it);
          } else {
            c->sub = std::move(sub);
            c->ready = true;
          }
        }
      }
      for (auto& j : joining) j(ec);
    });
  }

  B& backend_;
  std::shared_ptr<shared> shared_;
};

}  // namespace dlock::detail
