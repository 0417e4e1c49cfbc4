// The bodies of Lock's engine: its owner entries, construction and
// destruction, the one acquire operation and error reporting (the release
// operation is in release.ipp, the blocking glue in blocking.ipp). Included
// at the bottom of lock.hpp; not a header to include on its own.
#pragma once

#include <dlock/detail/sleep.hpp>

namespace dlock {

// One owner of a lock object: its hold (if any) and the gate its acquire
// tries and releases pass one at a time.
template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
struct Lock<BackendT, OwnershipT, RenewalT, WaitT>::owner_entry {
  detail::owner_gate gate;
  std::shared_ptr<record_type> rec;  // the current hold; null when none (mutex_)
  std::string pending_release;  // the std interface's release to retry (mutex_)
  int users = 0;                // operations using this entry (mutex_)
};

// Keeps an owner entry in owners_ while an operation uses it.
template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
class Lock<BackendT, OwnershipT, RenewalT, WaitT>::entry_use {
 public:
  entry_use(Lock* lock, std::string key, bool create);
  ~entry_use();
  entry_use(const entry_use&) = delete;
  entry_use& operator=(const entry_use&) = delete;
  owner_entry* operator->() const noexcept { return entry_.get(); }
  owner_entry& operator*() const noexcept { return *entry_; }
  explicit operator bool() const noexcept { return entry_ != nullptr; }

 private:
  Lock* lock_;
  std::string key_;
  std::shared_ptr<owner_entry> entry_;
};

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
int Lock<BackendT, OwnershipT, RenewalT, WaitT>::held_count(const std::string& key) const {
  std::lock_guard g(mutex_);
  auto it = owners_.find(key);
  return it == owners_.end() || !it->second->rec ? 0 : it->second->rec->hold_count;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
int Lock<BackendT, OwnershipT, RenewalT, WaitT>::held_count(const std::shared_ptr<owner_entry>& entry) const {
  std::lock_guard g(mutex_);
  return entry->rec ? entry->rec->hold_count : 0;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
Lock<BackendT, OwnershipT, RenewalT, WaitT>::entry_use::entry_use(Lock* lock, std::string key, bool create)
    : lock_(lock), key_(std::move(key)) {
  std::lock_guard g(lock_->mutex_);
  auto it = lock_->owners_.find(key_);
  if (it == lock_->owners_.end()) {
    if (!create) return;
    it = lock_->owners_.emplace(key_, std::make_shared<owner_entry>()).first;
  }
  entry_ = it->second;
  ++entry_->users;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
Lock<BackendT, OwnershipT, RenewalT, WaitT>::entry_use::~entry_use() {
  if (!entry_) return;
  std::lock_guard g(lock_->mutex_);
  if (--entry_->users == 0 && !entry_->rec && entry_->pending_release.empty()) {
    auto it = lock_->owners_.find(key_);
    if (it != lock_->owners_.end() && it->second == entry_) lock_->owners_.erase(it);
  }
}

// Out of the class body, so that a combination declared `extern template`
// (Lock<> in dlock.hpp) does not instantiate its keeper and engines in every
// file that constructs one: an inline constructor would be instantiated for
// inlining, and with it everything its members need.
template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
Lock<BackendT, OwnershipT, RenewalT, WaitT>::Lock(BackendT& backend, std::string name, OwnershipT ownership,
                                                  RenewalT renewal, WaitT wait)
    : backend_(backend),
      name_(std::move(name)),
      ownership_(std::move(ownership)),
      renewal_(std::move(renewal)),
      wait_(std::move(wait)),
      keeper_(renewal_, backend_) {
  if (auto ec = detail::validate_name(name_)) throw std::system_error(ec, "dlock::Lock name");
  if (auto ec = ownership_.validate()) throw std::system_error(ec, "dlock::Lock ownership policy");
  if (auto ec = renewal_.validate()) throw std::system_error(ec, "dlock::Lock renewal policy");
  if (auto ec = wait_.validate()) throw std::system_error(ec, "dlock::Lock wait policy");
  // A write too few replicas acknowledged is given back, which only an
  // owner-checked release can do without deleting someone else's lock.
  // Under a backend's default (owner-checked locks only) the others run
  // unacknowledged.
  if (!OwnershipT::owner_checked && detail::acknowledges_every_lock(backend_))
    throw std::system_error(make_error_code(error::invalid_argument),
                            std::string("dlock::Lock: replica acknowledgement needs an owner-checked ownership "
                                        "(token, reentrant hash, queue, semaphore or read-write), not ") +
                                OwnershipT::policy_name);
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
Lock<BackendT, OwnershipT, RenewalT, WaitT>::~Lock() {
  bool can_wait = !backend_.on_io_thread();
  const auto in_flight = inflight_.cancel_all();
  if (can_wait) {
    inflight_.wait_idle();
    background_.wait_idle();
  } else if (in_flight > 0) {
    report(make_error_code(error::would_deadlock), "~Lock on the backend's own thread with operations in flight");
  }
  std::vector<std::pair<std::string, std::shared_ptr<owner_entry>>> left;
  {
    std::lock_guard g(mutex_);
    for (auto& [key, entry] : owners_)
      if (entry->rec) left.emplace_back(key, entry);
  }
  for (auto& [key, entry] : left) {
    auto rec = entry->rec;
    if (!can_wait) {
      keeper_.end(rec.get());
      report(make_error_code(error::would_deadlock), "~Lock on the backend's own thread (holds lapse with their leases)");
      continue;
    }
    while (held_count(entry) > 0) {
      auto r = release_blocking(key, nullptr, {}, /*abandon=*/true);
      if (r.ec) {
        report(r.ec, "release in ~Lock", r.server_reply);
        break;
      }
    }
  }
}

// g++ 12 with Boost 1.81's Asio can warn that an awaitable's frame is
// freed by a mismatched operator delete when it inlines the frame's
// allocation into a large coroutine (a false positive: Asio allocates and
// frees frames with aligned_alloc and free through its own recycling
// allocator; reported upstream as chriskohlhoff/asio#1391). Silenced for
// this one function only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::acquire_op(std::string key, detail::steady::time_point deadline)
    -> asio::awaitable<acquire_result> {
  co_await asio::this_coro::throw_if_cancelled(false);
  co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
  auto cancelled = [&]() -> asio::awaitable<bool> {
    auto state = co_await asio::this_coro::cancellation_state;
    co_return state.cancelled() != asio::cancellation_type::none;
  };

  entry_use entry(this, key, true);
  detail::wait_steps<WaitT, BackendT, adapted_ownership> steps(wait_, backend_, ownership_, name_);
  std::shared_ptr<record_type> fresh;  // ours if we win a free lock
  std::shared_ptr<record_type> tried;  // the record of the last try (fresh, or a held one's)
  bool prepared = false;

  // The lock is ours: count the hold, start its renewal.
  auto take = [&](const std::shared_ptr<record_type>& rec) {
    steps.done();
    bool first = false;
    {
      std::lock_guard g(mutex_);
      first = ++rec->hold_count == 1;
      entry->rec = rec;
      // A new hold: an unanswered release of an earlier one is moot.
      if (first) entry->pending_release.clear();
    }
    if (first) keeper_.start(rec, ownership_);
    return acquire_result{error_code{}, rec, {}};
  };
  error_code ended;  // set when the acquire ends without the lock
  std::string server_reply;  // with `ended`, when the server said why
  bool unacknowledged = false;  // a try won, but too few replicas acknowledged it
  // Since when the tries in a row heard too few of a quorum's nodes (see
  // the no_quorum retry below); unset once a try hears a majority.
  std::optional<detail::steady::time_point> quorum_lost_since;
  std::string quorum_reply;  // the last such try's message
  // A vote heard too few nodes: whether the wait goes on, which it does
  // for at most one lease (see the try below).
  auto quorum_short = [&](std::string words, milliseconds lease) {
    const auto now = detail::steady::now();
    if (!quorum_lost_since) quorum_lost_since = now;
    quorum_reply = std::move(words);
    return now - *quorum_lost_since < lease;
  };
  for (;;) {
    attempt at;
    {
      // One try, with its bookkeeping, while no other operation of this
      // owner runs: Redis's hold count and ours move together.
      co_await entry->gate.enter();
      detail::gate_pass pass(entry->gate);
      std::shared_ptr<record_type> rec, retired;
      {
        std::lock_guard g(mutex_);
        // A hold found lost, or whose lease ran out unrenewed, is over:
        // a new acquire starts afresh instead of counting on it.
        if (entry->rec && (entry->rec->lost() || entry->rec->remaining() == milliseconds::zero()))
          retired = std::exchange(entry->rec, nullptr);
        rec = entry->rec;
      }
      if (retired) retire(retired);
      if (rec && !OwnershipT::reentrant) {
        ended = error::already_held;
        break;
      }
      if (!rec) {
        if (!fresh) fresh = make_record(key);
        rec = fresh;
      }
      // A grant needs no try: the release already made us the owner.
      const bool granted = steps.granted(*rec);
      if (granted) {
        rec->acks = {};  // written by the releaser: no WAIT of ours covers it
        at = attempt{true, std::nullopt};
      } else {
        co_await steps.before_try(*rec, deadline);
        rec->may_wait = detail::steady::now() < deadline;
        tried = rec;
        auto [ec, won] = co_await try_once(*rec);
        if (ec == error::no_quorum) {
          // Too few nodes answered this vote, and no majority holds it
          // (Quorum gave back what it could): as Redlock's algorithm says, the
          // wait goes on as behind a holder (a node slow for a moment, or
          // restarting, loses one vote, not the acquire), for at most one
          // lease from the first such vote; then, or at the deadline, the
          // acquire fails with no_quorum and the last vote's message.
          if (!quorum_short(std::move(rec->server_reply), rec->lease)) {
            ended = ec;
            server_reply = std::move(quorum_reply);
            break;
          }
          won.acquired = false;
        } else if (ec) {
          ended = ec;
          server_reply = std::move(rec->server_reply);
          break;
        } else {
          quorum_lost_since.reset();
        }
        at = won;
      }
      if (at.acquired && settling()) {
        auto settled = co_await settle_win(*rec);
        if (settled.ec) {
          ended = settled.ec;
          server_reply = std::move(settled.server_reply);
          break;
        }
        if (!settled.kept) {
          // Given back (or found gone): the wait goes on, and the next try
          // comes at once (the lock is free, as far as this owner knows).
          unacknowledged = unacknowledged || (rec->acks.sent && !rec->acks.met());
          at = attempt{false, milliseconds(0)};
        }
      }
      if (!granted) steps.after_try(rec, at);
      if (at.acquired) {
        if (co_await cancelled()) {
          steps.done();
          co_return co_await release_cancelled_win(*rec);
        }
        co_return take(rec);
      }
    }
    if (detail::steady::now() >= deadline) {
      ended = error::not_acquired;
      break;
    }
    if (co_await cancelled()) {
      ended = asio::error::operation_aborted;
      break;
    }
    if (!prepared) {
      // Only a contended acquire pays for the wait's set-up (PubSub's
      // SUBSCRIBE).
      prepared = true;
      if ((ended = co_await steps.prepare())) {
        if constexpr (contract::backend_quorum<BackendT>) {
          // Too few nodes took the subscription: a pause of one reply
          // timeout, then a vote (which keeps the no_quorum window, above)
          // and a new subscription. While votes hear a majority that
          // holds, the wait polls so until its deadline.
          if (ended == error::no_quorum) {
            prepared = false;
            if (co_await cancelled()) {
              ended = asio::error::operation_aborted;
              break;
            }
            ended = co_await detail::sleep_until(std::min(deadline, detail::steady::now() + backend_.reply_timeout()));
            if (ended) break;  // cancelled
            continue;
          }
        }
        server_reply = steps.server_reply();
        break;
      }
    }
    if ((ended = co_await steps.wait(at.held_for, deadline))) {
      server_reply = steps.server_reply();
      break;
    }
  }
  if (ended == error::not_acquired && quorum_lost_since) {
    ended = error::no_quorum;  // the deadline came while no majority answered
    server_reply = std::move(quorum_reply);
  } else if (ended == error::not_acquired && unacknowledged) {
    ended = error::not_acknowledged;
  }
  // Ending without the lock: the waiter leaves whatever it joined (a
  // queue's line, in the script that checks for a grant). A grant that came
  // before is kept, or given back if the caller cancelled or this owner
  // already holds the lock.
  if (fresh) {
    co_await entry->gate.enter();
    detail::gate_pass pass(entry->gate);
    if (co_await steps.leave(fresh, background_)) {
      if (ended == asio::error::operation_aborted || ended == error::already_held) {
        auto given = co_await release_cancelled_win(*fresh);
        if (ended == error::already_held) given.ec = ended;
        co_return given;
      }
      // A grant that came before the waiter could leave: settled as any win,
      // with no WAIT of the tries counted for the releaser's write. Its lease
      // counts from when the waiter was last seen queued: if none is left
      // (a waiter stopped or slow since), it is given back.
      fresh->acks = {};
      bool late = false;
      if (fresh->remaining() == milliseconds::zero()) late = co_await give_back_if_late(*fresh);
      if (!late) {
        if (!settling()) co_return take(fresh);
        auto settled = co_await settle_win(*fresh);
        if (settled.kept) co_return take(fresh);
        if (settled.ec) {
          ended = settled.ec;
          server_reply = std::move(settled.server_reply);
        }
      }
    }
  }
  // What the failed tries left for this waiter (a writer's intent) goes,
  // whether they were a fresh hold's or a re-entry's.
  if constexpr (detail::ownership_withdraw<adapted_ownership, BackendT>) {
    if (tried) {
      co_await entry->gate.enter();
      detail::gate_pass pass(entry->gate);
      if (auto ec = co_await ownership_.withdraw(backend_, *tried))
        report(ec, "withdrawing what a failed acquire left (it expires on its own)",
               detail::words_for(ec, tried->server_reply));
    }
  }
  co_return acquire_result{ended, nullptr, detail::words_for(ended, std::move(server_reply))};
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
asio::awaitable<std::pair<error_code, attempt>> Lock<BackendT, OwnershipT, RenewalT, WaitT>::try_once(record_type& rec) {
  rec.attempt_id = detail::unique_id();
  rec.server_reply.clear();
  {
    // A record not held yet starts without a token (a win given back
    // before this try left one).
    std::lock_guard g(mutex_);
    if (rec.hold_count == 0) rec.fence.reset();
  }
  auto sent = detail::steady::now();
  auto [ec, at] = co_await ownership_.try_acquire(backend_, rec);
  if (detail::may_have_run(ec)) {
    auto [rec_ec, won] = co_await ownership_.resolve(backend_, rec);
    if (rec_ec) co_return std::pair{ec, attempt{}};  // still unknown
    // The lease began after the try was sent, or earlier where the
    // ownership says so (a waiter granted while in a queue's line).
    if (won) rec.confirm(detail::earliest_start<adapted_ownership>(rec, sent));
    ec = {};
    at = attempt{won, milliseconds(0)};
  }
  // A new hold confirmed too late to trust (the try waited for a connection,
  // or resolving a lost reply took the lease): given back as a win that never came.
  if (!ec && at.acquired && rec.remaining() == milliseconds::zero()) {
    if (co_await give_back_if_late(rec)) at = attempt{false, milliseconds(0)};
  }
  co_return std::pair{ec, at};
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
int Lock<BackendT, OwnershipT, RenewalT, WaitT>::shared_held(const std::string& owner_id, bool async) const {
  return held_count(std::string(detail::shared_key_prefix) + owner_key(owner_id, async));
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::retire(const std::shared_ptr<record_type>& rec) {
  keeper_.end(rec.get());
  rec->mark_lost();
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::acquire_hold(std::string owner_id, detail::steady::time_point deadline,
                                                               bool shared)
    -> asio::awaitable<std::tuple<error_code, hold_type>> {
  // With shared holds, an id ending in ":write" would make a reader's field
  // that reads as the writer field of another owner (ReadWrite's layout).
  if (owner_id.empty() || owner_id.size() > max_name_length ||
      (detail::shares<OwnershipT>() && std::string_view(owner_id).ends_with(":write")))
    co_return std::tuple<error_code, hold_type>{error::invalid_argument, hold_type{}};
  auto key = owner_key(owner_id, true);
  if (shared) key.insert(0, detail::shared_key_prefix);
  auto r = co_await acquire_op(key, deadline);
  if (r.ec) co_return std::tuple<error_code, hold_type>{r.ec, hold_type{}};
  co_return std::tuple<error_code, hold_type>{error_code{}, hold_type(this, std::move(key), true, std::move(r.rec))};
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::report(std::error_code ec, const std::string& what,
                                                         const std::string& server_reply) noexcept {
  try {
    std::function<void(std::error_code, const std::string&)> handler;
    {
      std::lock_guard g(mutex_);
      handler = error_handler_;
    }
    if (handler) handler(ec, detail::with_server_reply(what, server_reply));
    else
      std::fprintf(stderr, "dlock: %s of lock '%s' failed: %s\n", what.c_str(), name_.c_str(),
                   detail::with_server_reply(ec.message(), server_reply).c_str());
  } catch (...) {
    std::fprintf(stderr, "dlock: %s of lock '%s' failed, and its error handler threw\n", what.c_str(), name_.c_str());
  }
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::make_record(const std::string& key) const -> std::shared_ptr<record_type> {
  auto rec = std::make_shared<record_type>();
  rec->name = name_;
  rec->owner = ownership_.make_owner(backend_.client_id(), key);
  rec->shared = std::string_view(key).starts_with(detail::shared_key_prefix);
  rec->lease = renewal_.lease();
  rec->margin = renewal_.margin();
  return rec;
}

}  // namespace dlock
