// The per-channel subscription lifecycle that the pub/sub waits share: one
// subscription per channel per backend, started by the first waiter that
// needs it, shared by the others, ended when the last has gone (at once, or
// after a linger), and each message handed to the channel's members.
#pragma once

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

#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/subscription.hpp>

namespace dlock::detail {

namespace asio = boost::asio;
using redis::error_code;

/// A channel's subscription may take in more channels than the one it is
/// named after: that one and then, in this order, the name plus each of
/// `suffixes` (wake_groups: the presence channel and the backend's own).
/// They are joined one after another, each once the one before is
/// confirmed, and left in the reverse order; their messages and notices
/// all go to the channel's members.
///
/// `Members` is what one channel keeps of its waiters (a container with
/// `empty()` and `size()`), touched only under the mutex; `on_message` is
/// called with a channel's members and each message (nullopt after the
/// subscriber reconnected: messages may have been lost), on the subscriber's
/// strand under the mutex, so it must not block.
///
/// A channel is shared: tickets of its users keep it (shared_ptr); the map
/// keeps it while it has members or a subscription. Everything a callback
/// touches is reached through a weak pointer, so a callback that comes
/// after the service is gone does nothing.
template <class B, class Members>
class channel_subscriptions {
 public:
  // The subscriptions of one channel, ended in the reverse order of their
  // making (a vector ends its elements in no promised order).
  struct subscriptions {
    std::vector<redis::subscription> subs;
    subscriptions() = default;
    subscriptions(subscriptions&&) noexcept = default;
    subscriptions& operator=(subscriptions&& other) noexcept {
      clear();
      subs = std::move(other.subs);
      return *this;
    }
    ~subscriptions() { clear(); }
    void clear() {
      while (!subs.empty()) subs.pop_back();
    }
  };

  struct channel {
    std::string key;  // routes its subscription: its messages come from scripts on this key
    Members members;
    subscriptions sub;
    bool ready = false, subscribing = false;
    // Waiting for `sub`: told the error and, when the server refused the
    // subscribe, its words.
    std::vector<std::function<void(error_code, const std::string&)>> joining;
    std::uint64_t idle_epoch = 0;  // bumped whenever the member count leaves zero
  };
  using message_handler = std::function<void(Members&, std::optional<std::string_view>)>;

  struct shared {
    std::mutex m;
    std::map<std::string, std::shared_ptr<channel>, std::less<>> channels;
    std::vector<std::string> suffixes;  // set once, before any subscription
  };

  channel_subscriptions(B& backend, message_handler on_message, std::vector<std::string> suffixes = {})
      : backend_(backend), on_message_(std::move(on_message)), shared_(std::make_shared<shared>()) {
    shared_->suffixes = std::move(suffixes);
  }

  ~channel_subscriptions() {
    std::map<std::string, std::shared_ptr<channel>, std::less<>> channels;
    {
      std::lock_guard g(shared_->m);
      channels.swap(shared_->channels);
    }
    // Their subscriptions end here, outside the mutex.
  }
  channel_subscriptions(const channel_subscriptions&) = delete;
  channel_subscriptions& operator=(const channel_subscriptions&) = delete;

  std::weak_ptr<shared> weak() const { return shared_; }

  /// Runs `join(members)` under the mutex on `name`'s channel (made if it
  /// is new, routed by `key`: the lock whose scripts publish on it) and
  /// returns the channel. Does not subscribe: see ready().
  template <class F>
  std::shared_ptr<channel> enter(std::string_view key, const std::string& name, F&& join) {
    std::lock_guard g(shared_->m);
    auto& slot = shared_->channels[name];
    if (!slot) {
      slot = std::make_shared<channel>();
      slot->key = key;
    }
    if (slot->members.empty()) ++slot->idle_epoch;  // cancels a pending retirement
    std::forward<F>(join)(slot->members);
    return slot;
  }

  /// Runs `part(members)` under the mutex; when that leaves the channel
  /// without members, its subscription ends at once (`linger` zero) or after
  /// `linger` if no member came meanwhile. Safe after the service is gone
  /// (then it does nothing): `weak` is its weak().
  template <class F>
  static void leave(const std::weak_ptr<shared>& weak, B& backend, const std::shared_ptr<channel>& c,
                    const std::string& name, std::chrono::milliseconds linger, F&& part) {
    auto s = weak.lock();
    if (!s) return;
    subscriptions last;  // unsubscribed outside the mutex
    std::uint64_t epoch = 0;
    {
      std::lock_guard g(s->m);
      std::forward<F>(part)(c->members);
      if (!c->members.empty()) return;
      if (linger > std::chrono::milliseconds::zero()) {
        epoch = c->idle_epoch;
      } else {
        if (c->subscribing) return;  // the subscription's completion ends it
        last = drop(*s, c, name);
        return;
      }
    }
    auto timer = std::make_shared<asio::steady_timer>(backend.get_executor(), linger);
    timer->async_wait([timer, weak, c, name, epoch](const error_code&) {
      auto s = weak.lock();
      if (!s) return;
      subscriptions last;  // unsubscribed outside the mutex (declared first: ends after the lock)
      std::lock_guard g(s->m);
      if (!c->members.empty() || c->idle_epoch != epoch || c->subscribing) return;
      last = drop(*s, c, name);
    });
  }

  /// Members of `name`'s channel (for tests and diagnostics).
  std::size_t waiting(std::string_view name) const {
    std::lock_guard g(shared_->m);
    auto it = shared_->channels.find(name);
    return it == shared_->channels.end() ? 0 : it->second->members.size();
  }

  /// Whether `name`'s channel is subscribed.
  bool subscribed(std::string_view name) const {
    std::lock_guard g(shared_->m);
    auto it = shared_->channels.find(name);
    return it != shared_->channels.end() && it->second->ready;
  }

  /// Whether `c`'s subscription is confirmed.
  static bool ready_now(const std::weak_ptr<shared>& weak, const std::shared_ptr<channel>& c) {
    auto s = weak.lock();
    if (!s) return false;
    std::lock_guard g(s->m);
    return c->ready;
  }

  /// Completes when `c`'s subscription is confirmed (or failed), starting it
  /// if nobody has: `void(error_code, std::string)`, the string being the
  /// server's words when it refused the subscribe.
  template <class CompletionToken>
  auto ready(const std::shared_ptr<channel>& c, const std::string& name, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(error_code, std::string)>(
        [this, c, name](auto handler) {
          auto ex = asio::get_associated_executor(handler, backend_.get_executor());
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          auto complete = [h, ex](error_code ec, const std::string& refusal) {
            asio::post(ex, [h, ec, refusal] { std::move (*h)(ec, refusal); });
          };
          bool start = false;
          {
            std::lock_guard lk(shared_->m);
            if (c->ready) {
              complete(error_code{}, {});
              return;
            }
            c->joining.push_back(complete);
            start = !std::exchange(c->subscribing, true);
          }
          if (start) subscribe(c, name);
        },
        token);
  }

 private:
  // Takes `c` out of the map (if it is still there) and gives back its
  // subscription, to be ended outside the mutex. Under the mutex.
  static subscriptions drop(shared& s, const std::shared_ptr<channel>& c, const std::string& name) {
    c->ready = false;
    if (auto it = s.channels.find(name); it != s.channels.end() && it->second == c) s.channels.erase(it);
    return std::move(c->sub);
  }

  void subscribe(const std::shared_ptr<channel>& c, const std::string& name) {
    std::weak_ptr<shared> weak = shared_;
    std::weak_ptr<channel> weak_c = c;
    auto listener = [weak, weak_c, on_message = on_message_](std::optional<std::string_view> message) {
      auto s = weak.lock();
      auto c = weak_c.lock();
      if (!s || !c) return;
      std::lock_guard lk(s->m);
      on_message(c->members, message);
    };
    subscribe_from(backend_, weak, c, name, std::move(listener), 0, std::make_shared<subscriptions>());
  }

  // Subscribes the channel's `i`-th name (0: the name itself, then the
  // suffixes), then the next; the last one's confirmation (or the first
  // error) completes the joiners.
  // suffixes are set before the first subscription and never change after.
  static void subscribe_from(B& backend, const std::weak_ptr<shared>& weak, const std::shared_ptr<channel>& c,
                             const std::string& name, redis::listener listener, std::size_t i,
                             std::shared_ptr<subscriptions> made) {
    auto s = weak.lock();
    if (!s) return;
    const std::string channel_name = i == 0 ? name : name + s->suffixes[i - 1];
    // Each one's notice (nullopt: it was subscribed again, or could not
    // be) goes to the members too: on a cluster a slot move resubscribes
    // them one by one, and a wake published on one not yet back is lost.
    backend.async_subscribe(c->key, channel_name, listener,
                            [&backend, weak, c, name, listener, i, made](error_code ec, redis::subscription sub) mutable {
      auto s = weak.lock();
      if (!s) return;
      const std::string refusal = sub.server_reply();  // taken before `sub` may move
      if (!ec) made->subs.push_back(std::move(sub));
      if (!ec && i < s->suffixes.size())
        return subscribe_from(backend, weak, c, name, std::move(listener), i + 1, std::move(made));
      std::vector<std::function<void(error_code, const std::string&)>> joining;
      // Unsubscribed outside the mutex (declared first: they end after the
      // lock): a subscription's end waits for a call of its listener, which
      // takes the mutex.
      subscriptions unused, replaced;
      {
        std::lock_guard lk(s->m);
        c->subscribing = false;
        joining.swap(c->joining);
        if (!ec) {
          replaced = std::move(c->sub);
          c->sub = std::move(*made);
          c->ready = true;
          if (c->members.empty()) unused = drop(*s, c, name);  // everyone left meanwhile
        } else {
          unused = std::move(*made);  // the channels joined before the one that failed
        }
      }
      for (auto& j : joining) j(ec, refusal);
    });
  }

  B& backend_;
  message_handler on_message_;
  std::shared_ptr<shared> shared_;
};

}  // namespace dlock::detail
