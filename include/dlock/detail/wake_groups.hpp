// wait::PubSub's wake-up inside one backend: the waiters of each release
// channel, in the order they began to wait, behind one subscription. A
// release message wakes one waiter, not all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
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
#include <boost/asio/use_awaitable.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/subscriber.hpp>

namespace dlock::detail {

namespace asio = boost::asio;
using redis::error_code;

/// One per backend (`use_service`). Every release of a lock publishes one
/// message, and one release frees the lock for one waiter: waking every
/// waiter of the backend only sends all but one of them back to sleep after
/// a try in vain (the thundering herd). So a message wakes the waiter that
/// has waited longest among those not woken yet, as Redisson's per-lock
/// semaphore does. A waiter that leaves holding a wake it did not use (its
/// deadline passed, it was cancelled, or its try won before it saw the
/// wake) passes it to the next in line. When the subscriber reconnects
/// (messages may have been lost), every waiter is woken to check the lock.
///
/// A waiter wakes only when the server says the lock was released: between
/// messages it sleeps until the holder's lease could end (the waiter's own
/// timer), so a lost message costs time, never a lock.
template <class B>
class wake_groups {
 public:
  /// Wakes one waiter: must not block (it runs under this service's mutex,
  /// on the subscriber's strand or a leaving waiter's thread); post.
  using waker = std::function<void()>;

 private:
  struct member {
    std::uint64_t id;
    waker wake;
    bool woken = false;  // woken and has not used it yet
  };
  struct group {
    std::list<member> members;  // in the order they joined
    redis::subscription sub;
    bool ready = false, subscribing = false;
    std::vector<std::function<void(error_code)>> joining;  // waiting for `sub`
  };
  struct shared {
    std::mutex m;
    std::map<std::string, std::shared_ptr<group>, std::less<>> groups;
    std::uint64_t next_id = 0;
  };

 public:
  /// A waiter's place in its channel's line; leaving the line is destroying it.
  class ticket {
   public:
    ticket(std::weak_ptr<shared> s, std::shared_ptr<group> g, std::string channel, std::uint64_t id)
        : shared_(std::move(s)), group_(std::move(g)), channel_(std::move(channel)), id_(id) {}
    ~ticket() { leave(); }
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;

    /// The waiter saw its wake (and will try the lock): it is no longer
    /// owed one, and a later message may wake it again.
    void consumed() {
      auto s = shared_.lock();
      if (!s) return;
      std::lock_guard g(s->m);
      for (auto& m : group_->members)
        if (m.id == id_) m.woken = false;
    }

   private:
    void leave() {
      auto s = shared_.lock();
      if (!s) return;
      redis::subscription last;  // unsubscribed outside the mutex
      {
        std::lock_guard g(s->m);
        auto& members = group_->members;
        for (auto it = members.begin(); it != members.end(); ++it) {
          if (it->id != id_) continue;
          bool owed = it->woken;
          members.erase(it);
          if (owed) wake_next(*group_);  // pass on a wake this waiter did not use
          break;
        }
        if (members.empty() && !group_->subscribing) {
          last = std::move(group_->sub);
          group_->ready = false;
          if (auto it = s->groups.find(channel_); it != s->groups.end() && it->second == group_) s->groups.erase(it);
        }
      }
    }

    std::weak_ptr<shared> shared_;
    std::shared_ptr<group> group_;
    std::string channel_;
    std::uint64_t id_;
  };

  explicit wake_groups(B& backend) : backend_(backend), shared_(std::make_shared<shared>()) {}

  ~wake_groups() {
    std::map<std::string, std::shared_ptr<group>, std::less<>> groups;
    {
      std::lock_guard g(shared_->m);
      groups.swap(shared_->groups);
    }
    // Their subscriptions end here, outside the mutex.
  }
  wake_groups(const wake_groups&) = delete;
  wake_groups& operator=(const wake_groups&) = delete;

  /// Joins `channel`'s line, last, and completes once the line's
  /// subscription is confirmed by the server: a message published after
  /// that is not missed. On error the ticket is null (and the waiter is out
  /// of the line).
  asio::awaitable<std::pair<error_code, std::unique_ptr<ticket>>> join(const std::string& channel, waker wake) {
    std::shared_ptr<group> g;
    std::uint64_t id = 0;
    {
      std::lock_guard lk(shared_->m);
      auto& slot = shared_->groups[channel];
      if (!slot) slot = std::make_shared<group>();
      g = slot;
      id = ++shared_->next_id;
      g->members.push_back(member{id, std::move(wake)});
    }
    auto t = std::make_unique<ticket>(shared_, g, channel, id);
    auto [ec] = co_await ready(g, channel, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return std::pair{ec, nullptr};
    co_return std::pair{error_code{}, std::move(t)};
  }

  /// Waiters in `channel`'s line (for tests and diagnostics).
  std::size_t waiting(std::string_view channel) const {
    std::lock_guard g(shared_->m);
    auto it = shared_->groups.find(channel);
    return it == shared_->groups.end() ? 0 : it->second->members.size();
  }

 private:
  // Wakes the longest-waiting member not woken yet, if any.
  static void wake_next(group& g) {
    for (auto& m : g.members) {
      if (m.woken) continue;
      m.woken = true;
      m.wake();
      return;
    }
  }

  // Completes when `g`'s subscription is confirmed (or failed), starting it
  // if nobody has.
  template <class CompletionToken>
  auto ready(const std::shared_ptr<group>& g, const std::string& channel, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(error_code)>(
        [this, g, channel](auto handler) {
          auto ex = asio::get_associated_executor(handler, backend_.get_executor());
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          auto complete = [h, ex](error_code ec) { asio::post(ex, [h, ec] { std::move (*h)(ec); }); };
          bool start = false;
          {
            std::lock_guard lk(shared_->m);
            if (g->ready) {
              complete(error_code{});
              return;
            }
            g->joining.push_back(complete);
            start = !std::exchange(g->subscribing, true);
          }
          if (start) subscribe(g, channel);
        },
        token);
  }

  void subscribe(const std::shared_ptr<group>& g, const std::string& channel) {
    std::weak_ptr<shared> weak = shared_;
    auto listener = [weak, channel](std::optional<std::string_view> message) {
      auto s = weak.lock();
      if (!s) return;
      std::lock_guard lk(s->m);
      auto it = s->groups.find(channel);
      if (it == s->groups.end()) return;
      if (message) {
        wake_next(*it->second);
      } else {  // reconnected: messages may be lost; everyone checks
        for (auto& m : it->second->members) {
          m.woken = true;
          m.wake();
        }
      }
    };
    backend_.async_subscribe(channel, std::move(listener), [weak, g, channel](error_code ec, redis::subscription sub) {
      auto s = weak.lock();
      if (!s) return;
      std::vector<std::function<void(error_code)>> joining;
      redis::subscription unused;  // unsubscribed outside the mutex
      {
        std::lock_guard lk(s->m);
        g->subscribing = false;
        joining.swap(g->joining);
        if (!ec) {
          if (g->members.empty()) {  // everyone left meanwhile
            unused = std::move(sub);
            if (auto it = s->groups.find(channel); it != s->groups.end() && it->second == g) s->groups.erase(it);
          } else {
            g->sub = std::move(sub);
            g->ready = true;
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
