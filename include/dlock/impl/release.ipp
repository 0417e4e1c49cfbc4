// The bodies of Lock's one release operation: the gate, the ownership's
// release, what a failure leaves (a hold kept for a retry, or dropped where
// nobody can retry), and the async release's initiation. Included at the
// bottom of lock.hpp; not a header to include on its own.
#pragma once

#include <dlock/detail/bounded_release.hpp>

namespace dlock {

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::release_op(std::string key, std::shared_ptr<detail::hold_record> hold_rec, std::string id,
                                                bool abandon) -> asio::awaitable<release_result> {
  entry_use entry(this, key, false);
  auto gone = [&] {
    return release_result{hold_rec && hold_rec->lost() ? error::lease_lost : error::not_owner, {}, {}};
  };
  if (!entry) co_return gone();
  co_await entry->gate.enter();
  detail::gate_pass pass(entry->gate);
  std::shared_ptr<record_type> rec;
  bool last = false;
  {
    std::lock_guard g(mutex_);
    rec = entry->rec;
    if (!rec) entry->pending_release.clear();  // whatever it was about is over
    if (!rec || (hold_rec && rec != hold_rec)) co_return gone();
    last = rec->hold_count <= 1;
    if (!hold_rec) id = std::exchange(entry->pending_release, std::string());
  }
  bool retry = !id.empty();
  // A hold already signalled lost stays lost: the release still runs (the
  // key may still be ours), but its holder hears lease_lost, as it did
  // from the loss signal.
  bool signalled = rec->lost();
  // Renewal stops before the release is queued: no renewal can follow it.
  if (last) keeper_.pause(rec.get());
  if (!retry) id = detail::unique_id();
  rec->release_id = id;
  rec->release_retry = retry;
  rec->server_reply.clear();
  // Waits for a connection no longer than the lease (see the helper).
  auto [ec, outcome] = co_await detail::release_until_lease_end(ownership_, backend_, *rec);
  if (ec) {
    auto server_reply = std::move(rec->server_reply);
    if (abandon) {
      drop_one(*entry, rec);
      co_return release_result{ec, {}, detail::words_for(ec, std::move(server_reply))};
    }
    // Not run: still held, so keep it alive, unless an earlier attempt of
    // this release may have run.
    if (last && !retry && !detail::may_have_run(ec)) keeper_.start(rec, ownership_);
    if (!hold_rec) {
      std::lock_guard g(mutex_);
      entry->pending_release = id;
    }
    co_return release_result{ec, id, detail::words_for(ec, std::move(server_reply))};
  }
  bool lost = outcome == release_outcome::lease_lost || outcome == release_outcome::not_owner;
  bool others_lost = false, ended = false;
  {
    std::lock_guard g(mutex_);
    if (outcome == release_outcome::still_held && rec->hold_count > 1) {
      --rec->hold_count;
    } else {
      // The last local hold ended (a still_held reply then means another
      // lock object of this owner still counts in the hash), or the key is
      // gone: any other hold of this record has ended with it.
      others_lost = outcome == release_outcome::released && rec->hold_count > 1;
      rec->hold_count = 0;
      if (entry->rec == rec) entry->rec = nullptr;
      ended = true;
    }
  }
  if (lost || others_lost) retire(rec);  // ends it, and tells its holders
  else if (ended) keeper_.end(rec.get());
  co_return release_result{lost || signalled ? error_code(error::lease_lost) : error_code{}, {}, {}};
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::drop_one(owner_entry& entry, const std::shared_ptr<record_type>& rec) {
  bool ended = false;
  {
    std::lock_guard g(mutex_);
    if (--rec->hold_count <= 0) {
      rec->hold_count = 0;
      if (entry.rec == rec) entry.rec = nullptr;
      ended = true;
    }
  }
  if (ended) keeper_.end(rec.get());
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
template <class CompletionToken>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::initiate_release(Lock* lock, hold_type& hold, CompletionToken&& token) {
  if (!lock || !hold.record_) {
    return asio::async_initiate<CompletionToken, void(error_code)>(
        [](auto handler) {
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(error::not_owner); });
        },
        token);
  }
  return detail::spawn_tracked<>(lock->inflight_, asio::make_strand(lock->backend_.get_executor()),
                                 lock->release_hold(hold), std::forward<CompletionToken>(token));
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
asio::awaitable<std::tuple<error_code>> Lock<BackendT, OwnershipT, RenewalT, WaitT>::release_hold(hold_type& hold) {
  // A release runs to its end whatever cancellation is asked for (see
  // async_release): once its command may have left, stopping it would
  // leave the caller not knowing whether the lock is still held.
  co_await asio::this_coro::reset_cancellation_state(asio::disable_cancellation());
  co_await asio::this_coro::throw_if_cancelled(false);
  auto r = co_await release_op(hold.owner_key_, hold.record_, hold.release_id_, false);
  conclude_release(hold, r.ec, std::move(r.retry_id));
  co_return std::tuple<error_code>{r.ec};
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::conclude_release(hold_type& hold, const error_code& ec, std::string id) {
  if (hold_type::keep_after(ec)) hold.release_id_ = std::move(id);
  else hold.forget();
}

}  // namespace dlock
