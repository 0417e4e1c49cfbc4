// wait::PubSub's wake-up inside one backend: the waiters of each release
// channel, in the order they began to wait, behind one subscription. A
// release message wakes the waiter it names, or one waiter of the backend,
// never all of them.
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
#include <dlock/detail/named_wake.hpp>
#include <dlock/detail/publishing.hpp>
#include <dlock/detail/random.hpp>

namespace dlock::detail {

namespace asio = boost::asio;
using redis::error_code;

/// One per backend (`use_service`). One release frees the lock for one
/// waiter: waking more only sends all but one back to sleep after a try in
/// vain (the thundering herd). Each waiter has a number (waiter_number); an
/// ownership whose release names the waiter it wakes (ReentrantHash, see
/// named_waiter) publishes that number, and only that waiter wakes, in
/// whichever backend it is. A release that names nobody publishes "0"
/// (Redisson's unlock message): it wakes, in each backend, the waiter that
/// has waited longest among those not woken yet, as Redisson's per-lock
/// semaphore does; so does any other message but these two: "1"
/// (Redisson's read-write unlock, after which readers may all enter) wakes
/// every waiter, and "00" (Redisson's waiters' copy of a named wake)
/// nobody. A waiter that leaves holding an unnamed wake
/// it did not use (its deadline passed, it was cancelled, or its try won
/// before it saw the wake) passes it to the next in line; a named one is
/// passed on by the server (the ownership's forget_waiter). When the
/// subscriber reconnects (messages may have been lost), every waiter is
/// woken to check the lock.
///
/// The fan-out: a release that names a waiter publishes its number on that
/// waiter's backend's own channel (the release channel plus ":" and the
/// backend's tag; each backend waiting on a lock subscribes to it), so one
/// client hears it whatever the number of waiting clients; and "00" on the
/// release channel only when some of its subscribers are not dlock's (the
/// release counts them against the presence channel, ":dlock", to which
/// each dlock backend waiting on the lock subscribes too). A line entry is
/// thus "<number>:<tag>" (ticket::entry). Each backend still subscribes to
/// the release channel itself, for the "0" of Redisson's unlock.
///
/// A channel's subscription outlives its last waiter by the linger its
/// waiters ask for (0: it ends with the last), so that a client that keeps
/// taking a contended lock finds it up, and its waiter registers with its
/// first try.
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
    std::string number;  // its waiter number: a message naming it wakes it
    waker wake;
    waker nudge;         // it became the first of its line (may be empty)
    bool woken = false;  // woken and has not used it yet
    bool named = false;  // ... by a message that named it
  };
  using line = std::list<member>;  // in the order they joined
  using engine = channel_subscriptions<B, line>;

 public:
  /// A waiter's place in its channel's line; leaving the line is destroying it.
  class ticket {
   public:
    ticket(wake_groups& owner, std::shared_ptr<typename engine::channel> g, std::string channel, std::uint64_t id,
           std::string number, std::chrono::milliseconds linger)
        : backend_(owner.backend_), groups_(owner.groups_), shared_(owner.groups_.weak()), group_(std::move(g)),
          channel_(std::move(channel)), id_(id), number_(std::move(number)), tag_(owner.tag_), linger_(linger) {}
    ~ticket() {
      // The line's subscription ends with its last waiter, or `linger` after.
      engine::leave(shared_, backend_, group_, channel_, linger_, [&](line& members) {
        for (auto it = members.begin(); it != members.end(); ++it) {
          if (it->id != id_) continue;
          bool owed = it->woken && !it->named, was_first = it == members.begin();
          members.erase(it);
          if (owed) wake_next(members);  // pass on an unnamed wake this waiter did not use
          // The new first waiter's sleep is now the one the re-check bounds.
          if (was_first && !members.empty() && members.front().nudge) members.front().nudge();
          return;
        }
      });
    }
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;

    /// This waiter's number (what a release names to wake it).
    const std::string& number() const noexcept { return number_; }

    /// This waiter's entry in the lock's line: "<number>:<tag>", the tag
    /// naming the backend's own channel, where a release that takes the
    /// entry publishes the number.
    std::string entry() const { return number_ + ":" + tag_; }

    /// Completes once the line's subscription is confirmed by the server
    /// (starting it if nobody has): a message published after that is not
    /// missed. The server's words come with server_error (a refused
    /// SUBSCRIBE).
    asio::awaitable<std::pair<error_code, std::string>> ready() {
      auto [ec, words] = co_await groups_.ready(group_, channel_, asio::as_tuple(asio::use_awaitable));
      co_return std::pair{ec, std::move(words)};
    }

    /// Whether the line's subscription is confirmed now.
    bool subscribed() const { return engine::ready_now(shared_, group_); }

    /// What the waiter's wake was, now that it has seen it (and will try the
    /// lock): it is no longer owed one, and a later message may wake it
    /// again. True: a message named it (its number is out of the lock's
    /// line); false: a message for anyone, or a reconnect.
    bool consumed() {
      auto s = shared_.lock();
      if (!s) return false;
      std::lock_guard g(s->m);
      for (auto& m : group_->members) {
        if (m.id != id_) continue;
        m.woken = false;
        return std::exchange(m.named, false);
      }
      return false;
    }

    /// Whether it holds a wake it has not seen (or not used), and whether
    /// that wake named it.
    std::pair<bool, bool> owed() const {
      auto s = shared_.lock();
      if (!s) return {false, false};
      std::lock_guard g(s->m);
      for (auto& m : group_->members)
        if (m.id == id_) return {m.woken, m.named};
      return {false, false};
    }

    /// Whether it is the first of its backend's waiters on the channel (the
    /// one whose sleep the bounded re-check shortens).
    bool first() const {
      auto s = shared_.lock();
      if (!s) return false;
      std::lock_guard g(s->m);
      return !group_->members.empty() && group_->members.front().id == id_;
    }

   private:
    B& backend_;
    engine& groups_;
    std::weak_ptr<typename engine::shared> shared_;
    std::shared_ptr<typename engine::channel> group_;
    std::string channel_;
    std::uint64_t id_;
    std::string number_;
    std::string tag_;
    std::chrono::milliseconds linger_;
  };

  /// Each channel's subscription takes in the presence channel and this
  /// backend's own (see the class comment).
  explicit wake_groups(B& backend)
      : backend_(backend), tag_(random_hex(8)),
        groups_(backend, &deliver, {std::string(presence_suffix), ":" + tag_}) {}
  wake_groups(const wake_groups&) = delete;
  wake_groups& operator=(const wake_groups&) = delete;

  /// Joins `channel`'s line, last, at once (no I/O), with a new waiter
  /// number; the subscription may not be up yet (see ticket::ready and
  /// ticket::subscribed). `key`: the lock whose release publishes on
  /// `channel`; `linger`: how long the subscription outlives the line's
  /// last waiter (the longest any of its waiters asked for counts only if
  /// that waiter is the last; 0: it ends with the last); `nudge`, if given,
  /// is called (as `wake` is) when the waiter becomes the first of the
  /// line because the first left.
  std::unique_ptr<ticket> enter(std::string key, std::string channel, waker wake,
                                std::chrono::milliseconds linger = std::chrono::milliseconds::zero(),
                                waker nudge = {}) {
    auto id = ++next_id_;
    auto number = waiter_number();
    auto g = groups_.enter(key, channel, [&](line& members) {
      members.push_back(member{id, number, std::move(wake), std::move(nudge)});
    });
    return std::make_unique<ticket>(*this, std::move(g), std::move(channel), id, std::move(number), linger);
  }

  /// enter(), then completes once the line's subscription is confirmed by
  /// the server: a message published after that is not missed. On error the
  /// ticket is null (and the waiter is out of the line, and `refusal`, if
  /// given, gets the server's words when it refused the subscribe).
  asio::awaitable<std::pair<error_code, std::unique_ptr<ticket>>> join(std::string key, std::string channel,
                                                                       waker wake, std::string* refusal = nullptr) {
    auto t = enter(std::move(key), std::move(channel), std::move(wake));
    auto [ec, words] = co_await t->ready();
    if (refusal) *refusal = std::move(words);
    if (ec) co_return std::pair{ec, nullptr};
    co_return std::pair{error_code{}, std::move(t)};
  }

  /// Whether `channel`'s subscription is confirmed now (a waiter that joins
  /// it is heard from its first try on).
  bool subscribed(std::string_view channel) const { return groups_.subscribed(channel); }

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

  // A message wakes the waiter it names, or one waiter ("0"), or every
  // waiter ("1"), or nobody; after a reconnect (messages may be lost)
  // everyone checks.
  static void deliver(line& members, std::optional<std::string_view> message) {
    if (!message || read_wake(*message) == wake_kind::everyone) {
      for (auto& m : members) {
        m.woken = true;
        m.wake();
      }
      return;
    }
    switch (read_wake(*message)) {
      case wake_kind::one_per_client:
        wake_next(members);
        return;
      case wake_kind::named:
        for (auto& m : members) {
          if (m.number != *message) continue;
          m.woken = m.named = true;
          m.wake();
          return;
        }
        return;
      case wake_kind::none:
      case wake_kind::everyone:  // handled above
        return;
    }
  }

  B& backend_;
  std::atomic<std::uint64_t> next_id_{0};
  std::string tag_;  // 64 random bits, hex: names this backend's own channel
  engine groups_;
};

}  // namespace dlock::detail
