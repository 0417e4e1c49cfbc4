// The per-backend engines dlock's own waits are built on, for a wait policy
// written outside dlock that waits the same way (see
// docs/writing-a-policy.md). Each is a backend service: one per backend,
// reached with `backend.template use_service<...>()`.
#pragma once

#include <dlock/detail/grant_router.hpp>
#include <dlock/detail/queue_refresher.hpp>
#include <dlock/detail/wake_groups.hpp>
#include <dlock/ext.hpp>

namespace dlock::ext {

/// wait::PubSub's wake-up: the waiters of each release channel of one
/// backend behind one subscription, in the order they began to wait; a
/// release message wakes one of them, and a waiter that leaves with an
/// unused wake passes it on.
template <class B>
using wake_groups = detail::wake_groups<B>;

/// wait::HandOff's delivery: one subscription per grant channel of one
/// backend, each grant message routed to the waiter whose token it names.
template <class B>
using grant_router = detail::grant_router<B>;

/// wait::HandOff's line-entry refreshes for a queueing ownership `O`: one
/// `O::refresh_call` per lock per period for all of a backend's waiters in
/// that lock's line, every lock's script in one round trip.
template <class B, class O>
using queue_refresher = detail::queue_refresher<B, O>;

}  // namespace dlock::ext
