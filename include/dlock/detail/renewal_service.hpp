// The watchdog's engine: one timer per backend that renews every held lock
// due for renewal in one pipelined round trip, many holds per script call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <dlock/concepts.hpp>
#include <dlock/detail/key_slot.hpp>
#include <dlock/detail/script_batches.hpp>

namespace dlock::detail {

/// Renews holds by running their ownership's owner-checked extend script.
/// Entries due within half a period are renewed together, so N locks of one
/// period cost about one round trip per half period, not N. Holds whose
/// ownership merges renewals (its `extend_batch`) share one script call per
/// batch, at most `batch_limit()` holds each (100 by default), grouped by
/// ownership and, on a backend whose scripts may not cross slots (a
/// cluster), by slot: N held locks on one server cost about N / 100 script
/// calls per period, not N. Each hold's verdict is still its own: a lost
/// lock in a batch costs no other its renewal. It batches and schedules;
/// each reply is read by the reader its hold came with (the ownership's
/// read_extend or read_extend_batch).
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
  /// Holds per script call unless told otherwise (Redisson renews up to 100
  /// locks per call too): a script keeps the server to itself while it
  /// runs, and 100 renewals take it tens of microseconds.
  static constexpr std::size_t default_batch_limit = 100;

  explicit renewal_service(B& backend) : batches_(backend) { batches_.limit(default_batch_limit); }

  /// Renews `rec` every `period` with `call` while it is registered. The
  /// first renewal is due one period after the lease began (when the
  /// command that set it was sent), not after this call: a slow acquire
  /// reply must not push the renewal past the lease.
  /// `read` says what a reply means (the ownership's reader: this engine
  /// only batches and schedules); `batching`, how the ownership merges
  /// several holds' calls into one (none: each its own call).
  void add(const std::shared_ptr<hold_record>& rec, script_call call, milliseconds period,
           renewal_reader read = &read_extend_reply, renewal_batching batching = {}) {
    auto due = steady::now() + period;
    if (auto until = rec->valid_until(); until != steady::time_point::max()) due = std::min(due, until - rec->lease + period);
    std::string group = batching.merge ? group_of(call, batching) : std::string();
    batches_.put(rec, renewal{std::move(call), read, batching, std::move(group)}, period, due);
  }

  /// Stops renewing `rec`.
  void remove(const hold_record* rec) { batches_.remove(rec); }
  std::size_t size() const { return batches_.size(); }
  /// Round trips sent so far, script calls in them, and holds renewed by
  /// those calls (for tests and benchmarks).
  std::size_t batches_sent() const { return batches_.batches_sent(); }
  std::size_t calls_sent() const { return batches_.calls_sent(); }
  std::size_t renewals_sent() const { return batches_.entries_sent(); }
  /// Times its timer loop has stepped (see timer_loop::steps).
  std::size_t steps() const { return batches_.steps(); }
  /// At most `n` holds per script call from the next batch on (at least 1;
  /// 1: each hold sends its own extend_call, as an ownership without
  /// `extend_batch` does). For measuring what batching saves.
  void batch_limit(std::size_t n) { batches_.limit(std::max<std::size_t>(n, 1)); }
  std::size_t batch_limit() const { return batches_.limit(); }

 private:
  struct renewal {
    script_call call;
    renewal_reader read;
    renewal_batching batching;
    std::string group;  // empty: sent alone
  };

  // Calls merge when they come from the same merger with the same script
  // (one argument layout), and lie where one script may name them all.
  static std::string group_of(const script_call& call, const renewal_batching& b) {
    std::string g = std::to_string(reinterpret_cast<std::uintptr_t>(b.merge)) + ":" +
                    std::to_string(reinterpret_cast<std::uintptr_t>(call.script));
    if constexpr (!cross_slot_scripts<B>())
      if (!call.keys.empty()) g += ":" + std::to_string(key_slot(call.keys.front()));
    return g;
  }

  // A lone hold sends its own extend script, read by its own reader; a
  // group, its ownership's merged call, read by its batch reader.
  struct traits {
    using record = hold_record;
    using item = renewal;
    struct reading {
      renewal_reader one = nullptr;
      renewal_batch_reader many = nullptr;
    };
    static constexpr bool grouped = true;
    // A renewal extends a lease: with acknowledgement on, it counts only
    // once replicas have it (else a failover could undo it).
    static constexpr bool acknowledged = true;
    static const std::string& group_of(const item& r) { return r.group; }
    static script_call call(const std::vector<const item*>& group) {
      if (group.size() == 1) return group.front()->call;
      std::vector<const script_call*> calls;
      calls.reserve(group.size());
      for (auto* r : group) calls.push_back(&r->call);
      return group.front()->batching.merge(calls);
    }
    static reading reader(const std::vector<const item*>& group) {
      if (group.size() == 1) return {group.front()->read, nullptr};
      return {nullptr, group.front()->batching.read};
    }
    static std::vector<renewal_verdict> read(reading r, const redis::value& v, std::size_t n) {
      if (r.many) return r.many(v, n);
      return {r.one(v)};
    }
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
