// The rule table (which combinations of the four families can work) and
// the checks of a policy's numbers that every policy shares.
#pragma once

#include <string_view>
#include <system_error>

#include <dlock/hooks.hpp>

namespace dlock {

/// The rule table: which combinations can work. Lock's static_asserts turn
/// each broken rule into a sentence; the compile-time list of combinations
/// (combinations.hpp) keeps the ones where `ok` holds.
///
/// | rule | why |
/// |---|---|
/// | watchdog renewal needs owner-checked ownership (Token, ReentrantHash, Queue, Semaphore, ReadWrite) | an unchecked extend would keep someone else's lock alive |
/// | ownership that needs a lease (ReentrantHash, ReadWrite, GetSetExpiry) cannot take renewal::None | the hash's scripts set its expiry with every write (a dead holder's hash would be held for ever); GETSET's value is the expiry |
/// | pub/sub waiting needs ownership that publishes on release (ReentrantHash, Semaphore, ReadWrite) | otherwise no message ever wakes the waiter |
/// | hand-off waiting needs a queueing ownership (Queue), and Queue needs hand-off waiting | only Queue's release grants the lock to a waiter; Queue's line is kept by HandOff's waiters |
///
/// (GetSetExpiry falls under the first rule: it has no owner id, and its
/// expiry lives in the value, compared against other clients' clocks.)
template <class O, class R, class W>
struct rules {
  /// A renewal that renews goes with an owner-checked ownership.
  static constexpr bool watchdog_has_owner = !R::renews || O::owner_checked;
  /// An ownership that needs a lease gets one.
  static constexpr bool lease_present = !O::needs_lease || R::expires;
  /// A wait for the release message goes with an ownership that publishes it.
  static constexpr bool pubsub_has_publisher = !W::needs_publish || O::publishes_on_release;
  /// A wait that hands off goes with an ownership that queues, and only with one.
  static constexpr bool hand_off_matches_queue = detail::hands_off<W>() == detail::queues<O>();
  /// Every rule holds: the combination can work.
  static constexpr bool ok = watchdog_has_owner && lease_present && pubsub_has_publisher && hand_off_matches_queue;
};

/// The rules of a quorum backend (contract::backend_quorum: RedlockBackend),
/// which hold for every backend that is not one:
///
/// | rule | why |
/// |---|---|
/// | owner-checked ownership (Token, ReentrantHash) | a try that won on too few nodes is given back, by the ownership's release; an unchecked one would delete other owners' keys |
/// | a lease (FixedLease, Watchdog) | a hold's validity is the lease less the vote's time; a win that could not be given back must lapse |
/// | no hand-off (Queue, HandOff) | each node would keep its own line and grant its own head: no majority would agree on who is next |
/// | one holder at a time (no Semaphore, no ReadWrite) | majorities that each hold one of k permits per node can number more than k: on 3 nodes with 2 permits, holders on nodes {1,2}, {2,3} and {1,3} are three; a writer's majority can overlap readers' majorities |
template <class B, class O, class R, class W>
struct quorum_rules {
  /// Whether B is a quorum backend at all (the rules below hold otherwise).
  static constexpr bool quorum = contract::backend_quorum<B>;
  /// A partial win is given back by an owner-checked release.
  static constexpr bool gives_back = !quorum || O::owner_checked;
  /// Holds on a quorum expire.
  static constexpr bool has_lease = !quorum || R::expires;
  /// No line on a quorum.
  static constexpr bool no_line = !quorum || !(detail::queues<O>() || detail::hands_off<W>());
  /// One holder at a time on a quorum: a majority bounds one holder, not k.
  static constexpr bool one_holder = !quorum || !detail::admits_many<O>();
  /// Every rule holds.
  static constexpr bool ok = gives_back && has_lease && no_line && one_holder;
};

/// Whether ownership `O`, renewal `R` and wait `W` can work together on
/// backend `B` (the rule table, and the quorum rules on a quorum backend).
template <class B, class O, class R, class W>
inline constexpr bool valid_on = rules<O, R, W>::ok && quorum_rules<B, O, R, W>::ok;

namespace detail {

/// The rule table's sentences, for Lock to instantiate: each broken rule
/// is named by the first error a user sees.
template <class O, class R, class W>
struct rule_checks {
  static_assert(rules<O, R, W>::watchdog_has_owner,
                "watchdog renewal needs an ownership policy with an owner id: use ownership::Token or ownership::ReentrantHash, or renewal::FixedLease");
  static_assert(rules<O, R, W>::lease_present,
                "this ownership policy needs a lease: use renewal::FixedLease or renewal::Watchdog (only ownership::SetNx and ownership::Token work without one)");
  static_assert(rules<O, R, W>::pubsub_has_publisher,
                "pub/sub waiting needs an ownership policy that publishes on release: use ownership::ReentrantHash or ownership::Semaphore, or wait::Spin / wait::Backoff");
  static_assert(rules<O, R, W>::hand_off_matches_queue,
                "hand-off waiting and a queueing ownership go together: use ownership::Queue with wait::HandOff");
  static constexpr bool ok = rules<O, R, W>::ok;
};

/// The quorum rules' sentences, for Lock to instantiate.
template <class B, class O, class R, class W>
struct quorum_checks {
  static_assert(quorum_rules<B, O, R, W>::gives_back,
                "a quorum backend (RedlockBackend) gives back a partial win with the ownership's owner-checked release: use ownership::Token or ownership::ReentrantHash");
  static_assert(quorum_rules<B, O, R, W>::has_lease,
                "a quorum backend (RedlockBackend) needs a lease (a hold's validity is the lease less the vote's time, and a win that cannot be given back must lapse): use renewal::FixedLease or renewal::Watchdog");
  static_assert(quorum_rules<B, O, R, W>::no_line,
                "a quorum backend (RedlockBackend) cannot hand the lock over: each node would keep a line of its own and grant its own head, so no majority would agree on the next holder; use ownership::Token or ownership::ReentrantHash with wait::Spin, wait::Backoff or wait::PubSub");
  static_assert(quorum_rules<B, O, R, W>::one_holder,
                "a quorum backend (RedlockBackend) cannot bound an ownership that admits several holders (a semaphore, a read-write lock): majorities that each hold one of k permits per node can be more than k (3 nodes, 2 permits: holders on nodes {1,2}, {2,3} and {1,3}), and a writer's majority can overlap readers' majorities; use ownership::Token or ownership::ReentrantHash, or these on one server, Sentinel or a cluster");
  static constexpr bool ok = quorum_rules<B, O, R, W>::ok;
};

}  // namespace detail

/// Whether ownership `O`, renewal `R` and wait `W` can work together.
template <class O, class R, class W>
inline constexpr bool valid_combination = rules<O, R, W>::ok;

namespace detail {

inline std::error_code validate_name(std::string_view name) {
  if (name.empty() || name.size() > max_name_length) return make_error_code(error::invalid_name);
  return {};
}

inline std::error_code validate_positive(milliseconds d, error e) {
  if (d <= milliseconds::zero()) return make_error_code(e);
  return {};
}

/// invalid_lease unless 0 < lease <= max_lease and the margin leaves some
/// of it (`usable`: the part of the lease the margin must stay within).
inline std::error_code validate_lease(milliseconds lease, const loss_margin& margin, milliseconds usable) {
  if (lease <= milliseconds::zero() || lease > max_lease) return make_error_code(error::invalid_lease);
  if (auto ec = margin.validate()) return ec;
  if (margin.of(lease) >= usable) return make_error_code(error::invalid_lease);
  return {};
}

}  // namespace detail
}  // namespace dlock
