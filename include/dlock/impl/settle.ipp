// The bodies of Lock's win settlement: what happens between a try that won
// and the hold the caller gets. A win is given back (a cancelled acquire,
// too few replicas), or takes its fencing token, or waits for the
// replicas' acknowledgement. Included at the bottom of lock.hpp; not a
// header to include on its own.
#pragma once

namespace dlock {

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::release_cancelled_win(record_type& rec) -> asio::awaitable<acquire_result> {
  // Won, but the caller gave up: give it back before completing.
  if (auto ec = co_await release_won(rec))
    report(ec, "giving back a cancelled acquire (the lock lapses with its lease)", detail::words_for(ec, rec.server_reply));
  co_return acquire_result{asio::error::operation_aborted, nullptr, {}};
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
asio::awaitable<error_code> Lock<BackendT, OwnershipT, RenewalT, WaitT>::release_won(record_type& rec) {
  rec.release_id = detail::unique_id();
  rec.release_retry = false;
  rec.server_reply.clear();
  auto [ec, outcome] = co_await ownership_.release(backend_, rec);
  co_return ec;  // a refusal's words stay on `rec`
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
asio::awaitable<bool> Lock<BackendT, OwnershipT, RenewalT, WaitT>::give_back_if_late(record_type& rec) {
  // One not owner-checked cannot be given back safely: it lapses. Nor can a
  // hold already counted (a re-entry's record).
  bool late = OwnershipT::owner_checked && rec.remaining() == milliseconds::zero();
  if (late) {
    std::lock_guard g(mutex_);
    late = rec.hold_count == 0;
  }
  if (!late) co_return false;
  if (auto given = co_await release_won(rec))
    report(given, "giving back a win confirmed after its lease (the lock lapses with it)",
           detail::words_for(given, rec.server_reply));
  co_return true;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
bool Lock<BackendT, OwnershipT, RenewalT, WaitT>::settling() const {
  if constexpr (detail::fencing_ownership<adapted_ownership>) {
    if (ownership_.fencing) return true;
  }
  if constexpr (!OwnershipT::owner_checked) return false;  // runs unacknowledged (see the constructor)
  else return detail::acknowledging(backend_);
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::settle_win(record_type& rec) -> asio::awaitable<settled_win> {
  if (!settling()) co_return settled_win{};  // the callers skip the call then: no frame on the hot path
  rec.server_reply.clear();
  auto [ec, kept] = co_await fence_and_acknowledge(rec);
  co_return settled_win{ec, kept, ec ? std::move(rec.server_reply) : std::string()};
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
asio::awaitable<std::pair<error_code, bool>> Lock<BackendT, OwnershipT, RenewalT, WaitT>::fence_and_acknowledge(
    record_type& rec) {
  if constexpr (detail::fencing_ownership<adapted_ownership>) {
    if (ownership_.fencing && !rec.fence) {
      // Won without a token in the reply (a hand-off's grant, a lost reply
      // found to have won, a re-entry whose counter was gone): one is taken
      // now, owner-checked, while the lock is ours (so nobody can have
      // taken a later number in between). Acknowledged like any lock
      // write: a replica that has it has the win before it.
      auto call = ownership_.fence_call(rec);
      auto [ec, v] = co_await detail::acknowledged_eval(backend_, rec.acks, *call.script, std::move(call.keys),
                                                        std::move(call.args));
      if (ec) {
        // Whether it ran is not known, so neither is the token: the lock
        // is given back rather than handed out without one.
        if (auto given = co_await release_won(rec))
          report(given, "giving back a hold whose fencing token was lost", detail::words_for(given, rec.server_reply));
        rec.server_reply.clear();
        detail::note(rec, ec, v);  // the fence's refusal, not the give-back's
        co_return std::pair{ec, false};
      }
      rec.fence = detail::fence_of(v);
      if (!rec.fence) {
        // 0: the key is not ours any more (the grant's lease ran out).
        co_return std::pair{detail::integer_of(v) == 0 ? error_code{} : error_code(error::unexpected_reply), false};
      }
    }
  }
  if constexpr (OwnershipT::owner_checked)
    if (detail::acknowledging(backend_)) co_return co_await keep_if_acknowledged(rec);
  co_return std::pair{error_code{}, true};
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
asio::awaitable<std::pair<error_code, bool>> Lock<BackendT, OwnershipT, RenewalT, WaitT>::keep_if_acknowledged(
    record_type& rec) {
  if constexpr (OwnershipT::owner_checked) {
    // A win that no WAIT of ours followed (a hand-off's grant, or a lost
    // reply found to have won) is acknowledged by an owner-checked extend:
    // replicas apply the master's writes in order, so one that has the
    // extend has the win before it. A key without a lease has no extend;
    // it is given back.
    if (!rec.acks.sent && rec.lease > milliseconds::zero()) {
      auto call = ownership_.extend_call(rec);
      auto sent = detail::steady::now();
      auto [ec, v] = co_await detail::acknowledged_eval(backend_, rec.acks, *call.script, std::move(call.keys),
                                                        std::move(call.args));
      if (!ec) {
        auto verdict = adapted_ownership::read_extend(v);
        if (verdict == renewal_verdict::gone) co_return std::pair{error_code{}, false};  // not ours: nothing to give back
        if (verdict == renewal_verdict::renewed && rec.acks.met()) {
          rec.confirm(sent);
          co_return std::pair{error_code{}, true};
        }
      }
    }
    if (rec.acks.met()) co_return std::pair{error_code{}, true};
    // Too few replicas have it: a failover now could grant it again. Given
    // back, so that nobody holds what the replicas may not know of.
    auto refused = std::move(rec.acks.refused);
    if (auto ec = co_await release_won(rec)) co_return std::pair{ec, false};
    // The server refused the WAIT for want of a permission (a user without
    // +wait): every try would be refused so, so the acquire ends now, in
    // the server's words. (Another refusal, a replica's, goes on as too
    // few replicas: the next try's ROLE tells not_master.)
    if (refused.starts_with("NOPERM")) {
      rec.server_reply = std::move(refused);
      co_return std::pair{error_code(error::server_error), false};
    }
    co_return std::pair{error_code{}, false};
  } else {
    // The constructor refuses this combination; were it reached, nothing
    // could be given back safely, so the win does not count.
    co_return std::pair{error_code(error::invalid_argument), false};
  }
}

}  // namespace dlock
