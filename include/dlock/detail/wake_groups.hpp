// wait::PubSub's wake-up inside one backend: the waiters of each release
// channel, in the order they began to wait, behind one subscription. A
// release message wakes one waiter, not all of them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
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
  using line = std::list<member>;  // in the order they joined
  using engine = channel_subscriptions<B, line>;

 public:
  /// A waiter's place in its channel's line; leaving the line is destroying it.
  class ticket {
   public:
    ticket(B& backend, std::weak_ptr<typename engine::shared> s, std::shared_ptr<typename engine::channel> g,
           std::string channel, std::uint64_t id)
        : backend_(backend), shared_(std::move(s)), group_(std::move(g)), channel_(std::move(channel)), id_(id) {}
    ~ticket() {
      // The line's subscription ends with its last waiter.
      engine::leave(shared_, backend_, group_, channel_, std::chrono::milliseconds::zero(), [&](line& members) {
        for (auto it = members.begin(); it != members.end(); ++it) {
          if (it->id != id_) continue;
          bool owed = it->woken;
          members.erase(it);
          if (owed) wake_next(members);  // pass on a wake this waiter did not use
          return;
        }
      });
    }
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
    B& backend_;
    std::weak_ptr<typename engine::shared> shared_;
    std::shared_ptr<typename engine::channel> group_;
    std::string channel_;
    std::uint64_t id_;
  };

  explicit wake_groups(B& backend) : backend_(backend), groups_(backend, &deliver) {}
  wake_groups(const wake_groups&) = delete;
  wake_groups& operator=(const wake_groups&) = delete;

  /// Joins `channel`'s line, last, and completes once the line's
  /// subscription is confirmed by the server: a message published after
  /// that is not missed. On error the ticket is null (and the waiter is out
  /// of the line, and `refusal`, if given, gets the server's words when it
  /// refused the subscribe). `key`: the lock whose release publishes on
  /// `channel`.
  asio::awaitable<std::pair<error_code, std::unique_ptr<ticket>>> join(std::string key, std::string channel,
                                                                       waker wake, std::string* refusal = nullptr) {
    auto id = ++next_id_;
    auto g = groups_.enter(key, channel, [&](line& members) { members.push_back(member{id, std::move(wake)}); });
    auto t = std::make_unique<ticket>(backend_, groups_.weak(), g, channel, id);
    auto [ec, words] = co_await groups_.ready(g, channel, asio::as_tuple(asio::use_awaitable));
    if (refusal) *refusal = std::move(words);
    if (ec) co_return std::pair{ec, nullptr};
    co_return std::pair{error_code{}, std::move(t)};
  }

  /// Waiters in `channel`'s line (for tests and diagnostics).
  std::size_t waiting(std::string_view channel) const { return groups_.waiting(channel); }

 private:
  // Wakes the longest-waiting member not woken yet, if any.
  static void wake_next(line& members) {
    for (auto& m : members) {
      if (m.woken) continue;
      m.woken = true;
      m.wake();
      return;
    }
  }

  // A release message wakes one waiter; after a reconnect (messages may be
  // lost) everyone checks.
  static void deliver(line& members, std::optional<std::string_view> message) {
    if (message) {
      wake_next(members);
      return;
    }
    for (auto& m : members) {
      m.woken = true;
      m.wake();
    }
  }

  B& backend_;
  std::atomic<std::uint64_t> next_id_{0};
  engine groups_;
};

}  // namespace dlock::detail
