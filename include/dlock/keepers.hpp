// Keepers: what a renewal policy does while a hold lives. The host (Lock)
// tells a renewal policy's keeper when a hold starts, when its last release
// is about to be sent, and when it ends; the keeper decides what that means
// (nothing, a loss deadline, or a watchdog).
#pragma once

#include <chrono>
#include <memory>

#include <dlock/detail/hold_record.hpp>
#include <dlock/detail/lease_watch.hpp>
#include <dlock/detail/renewal_service.hpp>

namespace dlock::keepers {

/// The three calls every keeper answers (see contract::renewal_keeper):
/// - `start(rec, ownership)`: a hold began (its first acquire was
///   confirmed), or a release that paused it turned out not to have run;
/// - `pause(rec)`: the hold's last release is about to be sent: nothing may
///   extend the key after it (the hold may still come back via start);
/// - `end(rec)`: the hold is over (released, lost or abandoned): forget it.
///   Called once per hold.
/// Keepers are made once per lock object from the policy and the backend;
/// they must be safe to call from any thread.

/// Keeps nothing: a key without a lease needs no watching (renewal::None).
template <class B>
struct nothing {
  /// Made from the policy and the backend; needs neither.
  template <class R>
  nothing(const R&, B&) {}
  /// Nothing to watch or renew.
  template <class O>
  void start(const std::shared_ptr<detail::hold_record>&, const O&) {}
  /// Nothing to stop.
  void pause(const detail::hold_record*) {}
  /// Nothing to forget.
  void end(const detail::hold_record*) {}
};

/// Watches the hold's loss deadline and signals its loss there, before the
/// server could expire the key (renewal::FixedLease). One timer per
/// backend serves every hold (detail::lease_watch).
template <class B>
class lease {
 public:
  /// Made from the policy and the backend: uses the backend's lease watch.
  template <class R>
  lease(const R&, B& backend) : watch_(backend.template use_service<detail::lease_watch<B>>()) {}
  /// Watches `rec`: at its loss deadline (which a confirmed renewal moves
  /// later) it is marked lost and its loss callbacks run. A record without
  /// expiry is not watched.
  template <class O>
  void start(const std::shared_ptr<detail::hold_record>& rec, const O&) {
    watch_.add(rec);
  }
  /// Nothing: the loss deadline is still watched while the release is sent.
  void pause(const detail::hold_record*) {}
  /// Stops watching `rec`: once this returns, it is never signalled lost by
  /// the watch.
  void end(const detail::hold_record* rec) { watch_.remove(rec); }

 private:
  detail::lease_watch<B>& watch_;
};

/// As `lease`, and extends the key every `period()` of the policy with the
/// ownership's owner-checked `extend_call` (renewal::Watchdog). One timer
/// per backend renews every hold due, in one pipelined round trip, many
/// holds per script call when the ownership has `extend_batch`
/// (detail::renewal_service). After pause() or end() returns, no extension
/// of that hold is queued on the backend's connection after any command the
/// caller sends next on it (a blocking release goes on a connection of its
/// own, where an extension already on its way may still overtake it: being
/// owner-checked, it then extends nothing, or the same owner's next hold).
template <class B>
class renewing {
 public:
  /// Made from the policy and the backend: renews every `policy.period()`,
  /// with the backend's lease watch and renewal service.
  template <class R>
  renewing(const R& policy, B& backend)
      : lease_(policy, backend),
        renewals_(backend.template use_service<detail::renewal_service<B>>()),
        period_(policy.period()) {}
  /// Watches `rec` as `lease` does, and renews it every period with
  /// `ownership.extend_call(*rec)`, the first renewal one period after the
  /// lease began.
  template <class O>
  void start(const std::shared_ptr<detail::hold_record>& rec, const O& ownership) {
    lease_.start(rec, ownership);
    renewals_.add(rec, ownership.extend_call(*rec), period_, detail::extend_reader<O>(), detail::extend_batching<O>());
  }
  /// Stops renewing `rec`; its loss deadline is still watched.
  void pause(const detail::hold_record* rec) { renewals_.remove(rec); }
  /// Stops renewing and watching `rec`.
  void end(const detail::hold_record* rec) {
    renewals_.remove(rec);
    lease_.end(rec);
  }

 private:
  lease<B> lease_;
  detail::renewal_service<B>& renewals_;
  std::chrono::milliseconds period_;
};

}  // namespace dlock::keepers
