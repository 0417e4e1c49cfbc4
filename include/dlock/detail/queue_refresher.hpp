// wait::HandOff's entry refreshes, batched per backend: one timer keeps
// every queued waiter of the backend alive in its lock's line, with one
// script per lock per round and every lock's script in one pipeline.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <dlock/concepts.hpp>
#include <dlock/detail/publishing.hpp>
#include <dlock/detail/script_batches.hpp>

namespace dlock::detail {

/// Refreshes the line entries of the waiters of a queueing ownership `O`
/// (ownership::Queue), the way renewal_service renews leases: entries due
/// within half their period go together, one `O::refresh_call` per lock
/// naming all of this backend's waiters in its line, all locks in one
/// round trip. So N waiters of one process cost one script per period, not
/// N.
///
/// A refresh also looks after what a waiter's own periodic try used to:
/// - "still waiting" raises the waiter's `queued_since()` to the batch's
///   send time (a grant to it came later: its lease is counted from there);
/// - "holds the lock" (a grant whose message was lost) and "not in the
///   line" (its entry lapsed: a paused process) poke the waiter, whose own
///   try then settles it; a batch without an answer is sent again soon, and
///   pokes only the waiters whose entries are close to lapsing;
/// - a lock found free with waiters in line is handed on by the script.
template <class B, class O>
class queue_refresher {
 public:
  using record = record_t<O>;

  explicit queue_refresher(B& backend) : batches_(backend), sharded_(sharded_pubsub(backend)) {}

  /// Refreshes `rec`'s entry (token `rec->owner` in the line of
  /// `rec->name`, life `rec->state.entry_ttl`) every `rec->state.refresh`,
  /// the first time one period from now (its try just refreshed it), until
  /// removed. `poke` wakes its waiter to try again; it must not block.
  void add(const std::shared_ptr<record>& rec, std::function<void()> poke) {
    auto period = std::max(rec->state.refresh, milliseconds(1));
    auto now = steady::now();
    batches_.put(rec, waiting{rec->name, rec->owner, rec->state.entry_ttl, now, std::move(poke), sharded_}, period, now + period);
  }

  /// Stops refreshing `rec`'s entry.
  void remove(const hold_record* rec) { batches_.remove(rec); }
  std::size_t size() const { return batches_.size(); }
  /// Round trips sent so far, and entries refreshed in them (for tests).
  std::size_t batches_sent() const { return batches_.batches_sent(); }
  std::size_t refreshes_sent() const { return batches_.entries_sent(); }

 private:
  struct waiting {
    std::string name, token;
    milliseconds ttl;
    steady::time_point refreshed;  // send time of the last refresh confirmed (or of the try before add)
    std::function<void()> poke;
    bool sharded;  // the backend's pub/sub: the grants' verb
  };

  // The waiters of one lock share one script; O reads its reply, one
  // verdict per waiter. Pokes run under the engine's mutex: once remove()
  // returns, no poke of that waiter can still be on its way to an executor
  // that may be gone (a poke only posts).
  struct traits {
    using record = queue_refresher::record;
    using item = waiting;
    struct reading {};
    static constexpr bool grouped = true;
    // A waiter's place in line is not a hold: no replica need have it.
    static constexpr bool acknowledged = false;
    static const std::string& group_of(const item& w) { return w.name; }
    static script_call call(const std::vector<const item*>& line) {
      std::vector<std::pair<std::string, milliseconds>> waiters;
      waiters.reserve(line.size());
      for (auto* w : line) waiters.emplace_back(w->token, w->ttl);
      if constexpr (requires { O::refresh_call(line.front()->name, waiters, line.front()->sharded); })
        return O::refresh_call(line.front()->name, waiters, line.front()->sharded);
      else return O::refresh_call(line.front()->name, waiters);
    }
    static reading reader(const std::vector<const item*>&) { return {}; }
    static std::vector<renewal_verdict> read(reading, const redis::value& v, std::size_t n) {
      return O::read_refresh(v, n);
    }
    static bool keep(const record&) { return true; }
    // Still waiting when this ran: a grant to it came later.
    static bool renewed(record& rec, item& w, batch_entry<record, item>&, steady::time_point sent) {
      rec.state.note_queued(sent);
      w.refreshed = std::max(w.refreshed, sent);
      return true;
    }
    // Granted (its message lost) or out of the line: its own try settles it.
    static gone_action gone(record&, item& w) {
      w.poke();
      return gone_action::keep;
    }
    // No answer (a slow or dropped connection): tried again soon, batched
    // still; only an entry close to lapsing makes its waiter refresh it
    // with a try of its own.
    static void no_answer(item& w, batch_entry<record, item>& e, steady::time_point now) {
      if (now - w.refreshed >= w.ttl - e.period) w.poke();
    }
    static void signal(record&) {}
  };

  script_batches<B, traits> batches_;
  bool sharded_;
};

}  // namespace dlock::detail
