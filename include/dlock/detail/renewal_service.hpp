// The watchdog's engine: one timer per backend that renews every held lock
// due for renewal in one pipelined round trip.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <dlock/concepts.hpp>
#include <dlock/detail/script_batches.hpp>

namespace dlock::detail {

/// Renews holds by running each one's owner-checked extend script. Entries
/// due within half a period are renewed together, so N locks of one period
/// cost about one round trip per half period, not N. It batches and
/// schedules; each reply is read by the reader its hold came with (the
/// ownership's read_extend).
///
/// Ordering guarantee: after `remove(rec)` returns, no renewal of `rec` is
/// queued on the backend's connection after any command the caller sends
/// next on it (batches are queued under the same mutex `remove` takes, and
/// the connection writes in queue order). A blocking caller sends its
/// release on a blocking connection of its own, so a renewal already on its
/// way may reach the server after that release: it is owner-checked, so it
/// extends nothing, or the same owner's next hold, and its reply is
/// ignored (the entry is gone).
template <class B>
class renewal_service {
 public:
  explicit renewal_service(B& backend) : batches_(backend) {}

  /// Renews `rec` every `period` with `call` while it is registered. The
  /// first renewal is due one period after the lease began (when the
  /// command that set it was sent), not after this call: a slow acquire
  /// reply must not push the renewal past the lease.
  /// `read` says what a reply means (the ownership's reader: this engine
  /// only batches and schedules).
  void add(const std::shared_ptr<hold_record>& rec, script_call call, milliseconds period,
           renewal_reader read = &read_extend_reply) {
    auto due = steady::now() + period;
    if (auto until = rec->valid_until(); until != steady::time_point::max()) due = std::min(due, until - rec->lease + period);
    batches_.put(rec, renewal{std::move(call), read}, period, due);
  }

  /// Stops renewing `rec`.
  void remove(const hold_record* rec) { batches_.remove(rec); }
  std::size_t size() const { return batches_.size(); }
  /// Round trips sent so far, and scripts in them (for tests and benchmarks).
  std::size_t batches_sent() const { return batches_.batches_sent(); }
  std::size_t renewals_sent() const { return batches_.entries_sent(); }
  /// Times its timer loop has stepped (see timer_loop::steps).
  std::size_t steps() const { return batches_.steps(); }

 private:
  struct renewal {
    script_call call;
    renewal_reader read;
  };

  // Each hold sends its own extend script, read by its own reader.
  struct traits {
    using record = hold_record;
    using item = renewal;
    using reading = renewal_reader;
    static constexpr bool grouped = false;
    // A renewal extends a lease: with acknowledgement on, it counts only
    // once replicas have it (else a failover could undo it).
    static constexpr bool acknowledged = true;
    static script_call call(const std::vector<const item*>& one) { return one.front()->call; }
    static reading reader(const item& r) { return r.read; }
    static std::vector<renewal_verdict> read(reading r, const redis::value& v, std::size_t) { return {r(v)}; }
    // A hold signalled lost is not kept alive: its holder has stopped
    // trusting it, and the key should lapse rather than outlive that.
    static bool keep(const record& rec) { return !rec.lost(); }
    static bool renewed(record& rec, const item&, batch_entry<record, item>& e,
                        steady::time_point sent) {
      if (!rec.confirm(sent)) return false;  // signalled lost before this came: stays lost
      // A later renewal may be on its way already (a round trip as long as
      // the period): never pull its schedule back.
      e.next_due = std::max(e.next_due, sent + e.period);
      return true;
    }
    // The key is gone or someone else's: the holder is told.
    static gone_action gone(record&, const item&) { return gone_action::signal; }
    // Not confirmed: tried again soon. If no renewal is confirmed before the
    // loss deadline, the lease watch signals the loss.
    static void no_answer(const item&, batch_entry<record, item>&, steady::time_point) {}
    static void signal(record& rec) { rec.mark_lost(); }
  };

  script_batches<B, traits> batches_;
};

}  // namespace dlock::detail
