// wait::HandOff: wait in the lock's FIFO line until the release grants the
// lock to this waiter (with ownership::Queue).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <dlock/ext/waiting.hpp>

namespace dlock::wait {

/// Joins the lock's line (ownership::Queue) in the same script as a failed
/// try, and sleeps until the release hands it the lock: the grant message
/// names this waiter's token, and the acquire completes on it with no
/// command of its own. Waiters are served in the order they joined.
///
/// While it waits, the waiter's entry in the line lives `entry_ttl` (server
/// time) and is refreshed every third of it (every quarter of the lease,
/// when that is shorter: a grant's lease is counted from the last refresh).
/// The refreshes of all the waiters of one backend are batched
/// (ext::queue_refresher: one script per lock per period, in one round
/// trip), and a refresh also notices a grant whose message was lost, an
/// entry that lapsed, or a lock left free by a dead holder; the waiter is
/// then woken to try again. A waiter whose process dies drops out of the
/// line within `entry_ttl`. A wait that times out or is cancelled leaves
/// the line in the same script that checks for a grant, so a grant never
/// goes to a waiter that left (a grant that came first is kept when the
/// deadline passed, given back when the wait was cancelled). If that script
/// cannot be run (a dropped connection), it is retried in the background
/// until the entry has lapsed, and a grant found meanwhile is released.
///
/// A grant message names the stay in the line it was granted for; one
/// about an earlier stay (a grant that lapsed, say, before its message
/// came) does not count: the waiter asks the key instead.
///
/// The backend's subscription to the lock's grant channel outlives its
/// last waiter by `linger`: while it is up, a waiter's first try joins the
/// line at once (a grant can no longer be missed), so a contended acquire
/// costs its try and nothing else. An uncontended acquire on a backend that
/// has not waited on this lock recently neither subscribes nor registers.
struct HandOff {
  static constexpr const char* policy_name = "handoff";  ///< its name in Lock::combination_name()
  static constexpr bool needs_publish = false;  ///< listens for grants, not for release messages
  static constexpr bool hands_off = true;  ///< a release hands the lock to the waiter: goes with ownership::Queue

  milliseconds entry_ttl{3000};  ///< how long the waiter's entry in the line lives unrefreshed (server time)
  milliseconds linger{10000};  ///< how long the grant channel's subscription outlives its last waiter

  HandOff() = default;
  /// Entries that live `ttl`, and a subscription that lingers `linger_for`.
  explicit HandOff(milliseconds ttl, milliseconds linger_for = milliseconds(10000))
      : entry_ttl(ttl), linger(linger_for) {}

  /// invalid_interval unless 30 ms <= entry_ttl <= max_lease (a third of it
  /// is the refresh period) and linger >= 0.
  std::error_code validate() const {
    if (entry_ttl < milliseconds(30) || entry_ttl > max_lease || linger < milliseconds::zero())
      return make_error_code(error::invalid_interval);
    return {};
  }

  /// One acquire's waiter: its registration for grants (ext::grant_router)
  /// and, once a try has joined the line, its entry's refreshes
  /// (ext::queue_refresher). It has every waiter hook (see hooks.hpp).
  template <class B>
  class waiter {
   public:
    /// `channel`: where the ownership publishes grants (Queue::channel),
    /// followed by ":<this backend's client id>" (each backend hears only
    /// the grants to its own waiters).
    waiter(const HandOff& p, B& backend, const std::string& name, const std::string& channel)
        : entry_ttl_(p.entry_ttl), linger_(p.linger), backend_(backend), name_(name),
          channel_(channel + ":" + backend.client_id()) {}

    ~waiter() { done(); }
    waiter(const waiter&) = delete;
    waiter& operator=(const waiter&) = delete;

    /// Before each try: tells the try whether to join the line (in the
    /// record's place_in_line). Only while the backend is subscribed to the
    /// grant channel (or a grant could be missed) and the deadline has not
    /// passed (a try_lock() never queues). The token is registered for its
    /// grant before the first try that joins.
    template <class O, class Rec>
    asio::awaitable<void> before_try(const O&, Rec& rec, ext::steady::time_point deadline) {
      token_ = rec.owner;
      if (!ticket_ && router().subscribed(channel_)) co_await enter();
      // A grant's lease is counted from the last "queued" reply: refresh
      // often enough that little of it is lost (a quarter of a short lease).
      refresh_ = entry_ttl_ / 3;
      if (rec.lease > milliseconds::zero()) refresh_ = std::min(refresh_, std::max(rec.lease / 4, milliseconds(1)));
      auto& line = rec.state;
      line.entry_ttl = entry_ttl_;
      line.refresh = refresh_;
      line.join = ticket_ && ext::steady::now() < deadline && ticket_->ready();
      joined_ = joined_ || line.join;
    }

    /// Registers this waiter's token for grants, if before_try() has not, and
    /// completes once the backend's subscription to the grant channel is
    /// confirmed. If no try has joined the line yet, the first wait returns at
    /// once, so that the next try joins. An error ends the acquire
    /// (server_error when the server refused the SUBSCRIBE: see server_reply()).
    asio::awaitable<error_code> prepare() {
      if (!ticket_) co_await enter();
      auto ec = co_await ticket_->subscribed(refusal_);
      // Subscribed only now: the next try joins the line, at once.
      if (!joined_) state_->check = true;
      co_return ec;
    }

    /// Returns at once if a grant message came (granted() takes it) or the key
    /// must be checked; else sleeps until a grant message or the batched
    /// refresh wakes it, until the holder's lease could end (`held_for`, when
    /// known and not negative), or until `deadline`. Completes with no error,
    /// or with operation_aborted when the acquire is cancelled during the sleep.
    asio::awaitable<error_code> wait(std::optional<milliseconds> held_for, ext::steady::time_point deadline) {
      if (state_->granted || std::exchange(state_->check, false)) co_return error_code{};
      // Wake when the holder's lease could end, when a try said (a try
      // that joins the line does not ask: Queue's batched refresh hands on
      // a lock a dead holder left, and wakes this waiter if it must try,
      // see poker()).
      auto until = deadline;
      if (held_for && *held_for >= milliseconds::zero()) until = std::min(until, ext::steady::now() + *held_for);
      state_->timer.expires_at(until);
      auto [ec] = co_await state_->timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (state_->granted || std::exchange(state_->check, false)) co_return error_code{};
      if (ec == asio::error::operation_aborted) co_return ec;  // the operation was cancelled
      co_return error_code{};
    }

    /// Whether a grant message for this waiter's current place in the line
    /// came (taken once); if so the grant's lease is confirmed from the
    /// last moment the waiter was known to be queued. A message about
    /// another place (a grant that lapsed before this waiter joined again)
    /// only makes the next wait return at once, so that a try asks the key.
    /// So does a grant whose lease, counted from that moment, has no time
    /// left (a waiter stopped or starved since): the grant may have lapsed
    /// and the lock gone to another; the try finds out from the key.
    template <class O, class Rec>
    bool granted(const O&, Rec& rec) {
      if (!state_ || !std::exchange(state_->granted, false)) return false;
      if (rec.state.place != 0 && state_->grant_place == rec.state.place) {
        const auto since = rec.state.queued_since();
        if (since + rec.lease - rec.margin > ext::steady::now()) {
          rec.confirm(since);
          rec.state.reset();
          return true;
        }
      }
      state_->check = true;
      return false;
    }

    /// A try that left this waiter queued: from now on its entry is
    /// refreshed with the backend's other waiters' (a try refreshes it too,
    /// and restarts the period), until the acquire is over.
    template <class O, class Rec>
    void after_try(const O&, const std::shared_ptr<Rec>& rec, const attempt& at) {
      if (at.acquired || stop_refresh_ || !rec->state.joined || rec->state.place == 0) return;
      auto& refresher = backend_.template use_service<ext::queue_refresher<B, O>>();
      refresher.add(rec, poker());
      stop_refresh_ = [&refresher, rec] { refresher.remove(rec.get()); };
    }

    /// The acquire ends without the lock: leave the line, in the script that
    /// checks for a grant. True when a grant came first (the lock is held).
    /// If the script cannot be run (a dropped connection), the waiter is
    /// still in the line as far as anyone knows, and a grant may yet come:
    /// leaving is retried in the background until the entry has surely
    /// lapsed, and a grant found meanwhile is released at once (which hands
    /// the lock on), so it never sits unused until its lease ends.
    template <class O, class Rec>
    asio::awaitable<bool> leave(const O& o, const std::shared_ptr<Rec>& rec, ext::background& background) {
      stop_refreshing();
      if (!rec->state.joined) co_return false;
      auto [ec, granted] = co_await o.leave(backend_, *rec);
      if (ec) {
        background.spawn(backend_.get_executor(), leave_later(o, backend_, rec, background),
                         "leaving the lock's queue");
        co_return false;
      }
      if (granted) done();
      co_return granted;
    }

    /// The acquire is over: no more grants for this token, no refreshes.
    void done() {
      stop_refreshing();
      ticket_.reset();
    }

    /// What wakes this waiter to try again from another thread (the
    /// batched refresh, when it finds the lock granted or the entry gone).
    /// It posts to this operation's executor, so it must not be called
    /// once the operation is over (the refresher stops when the waiter is
    /// done); a poke that arrives after the waiter is gone does nothing.
    std::function<void()> poker() const {
      return [n = notify_] {
        if (n) n(false, 0);
      };
    }

    /// The server's words when it refused this waiter's SUBSCRIBE.
    const std::string& server_reply() const noexcept { return refusal_; }

   private:
    struct signal {
      explicit signal(const asio::any_io_executor& ex) : timer(ex) {}
      asio::steady_timer timer;
      bool granted = false;         // a grant message named this token
      std::int64_t grant_place = 0;  // ... for this place in the line
      bool check = false;           // try again now (just subscribed, or messages may be lost)
    };

    ext::grant_router<B>& router() { return backend_.template use_service<ext::grant_router<B>>(); }

    void stop_refreshing() {
      if (auto stop = std::exchange(stop_refresh_, nullptr)) stop();
    }

    // Until the entry has surely lapsed (its life, plus slack for clocks and
    // delays), keeps trying to leave; a grant found on the way is released
    // at once. The lock object waits for this (`background`), so `o`, the
    // backend and `background` outlive it.
    template <class O, class Rec>
    static asio::awaitable<void> leave_later(const O& o, B& backend, std::shared_ptr<Rec> rec,
                                             ext::background& background) {
      auto until = ext::steady::now() + rec->state.entry_ttl + std::chrono::seconds(1);
      error_code last;
      std::string last_words;  // the server's, behind a server_error
      do {
        rec->server_reply.clear();
        auto [ec, granted] = co_await o.leave(backend, *rec);
        if (!ec) {
          if (granted) {
            rec->release_id = ext::unique_id();
            rec->release_retry = false;
            rec->server_reply.clear();
            auto [rec_ec, outcome] = co_await o.release(backend, *rec);
            if (rec_ec)
              background.report(rec_ec, ext::with_server_reply(
                                            "giving back a grant that came after its wait ended (it lapses with its lease)",
                                            ext::words_for(rec_ec, rec->server_reply)));
          }
          co_return;
        }
        last = ec;
        last_words = ext::words_for(ec, rec->server_reply);
        co_await ext::sleep_until(ext::steady::now() + std::chrono::milliseconds(100));
      } while (ext::steady::now() < until);
      background.report(last, ext::with_server_reply("leaving the lock's queue (the entry lapsed by itself)", last_words));
    }

    // Registers the token for its grants, on this operation's executor.
    asio::awaitable<void> enter() {
      auto ex = co_await asio::this_coro::executor;
      state_ = std::make_shared<signal>(ex);
      std::weak_ptr<signal> weak = state_;
      // From the subscriber's strand to this operation's executor.
      auto notify = [weak, ex](bool granted, std::int64_t place) {
        asio::post(ex, [weak, granted, place] {
          if (auto s = weak.lock()) {
            if (granted) {
              s->granted = true;
              s->grant_place = place;
            } else {
              s->check = true;
            }
            s->timer.cancel();
          }
        });
      };
      notify_ = notify;
      ticket_ = router().enter(name_, channel_, token_, notify, linger_);
    }

    milliseconds entry_ttl_, linger_, refresh_{1000};
    B& backend_;
    std::string name_;  // the lock: its releases publish grants on channel_
    std::string channel_, token_;
    bool joined_ = false;  // a try that joins the line was sent
    std::shared_ptr<signal> state_;
    std::function<void(bool, std::int64_t)> notify_;  // posts to this operation's executor
    std::function<void()> stop_refresh_;  // set while the backend's refresher keeps the entry alive
    std::unique_ptr<typename ext::grant_router<B>::ticket> ticket_;
    std::string refusal_;  // the server's words, when it refused the SUBSCRIBE
  };
};

}  // namespace dlock::wait
