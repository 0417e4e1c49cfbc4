// The watchdog's engine: one timer per backend that renews every held lock
// due for renewal in one pipelined round trip.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <dlock/concepts.hpp>
#include <dlock/detail/timer_loop.hpp>

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
  explicit renewal_service(B& backend) : impl_(std::make_shared<impl>(backend)) { impl_->start(); }
  /// Stops at once: no batch is sent after this returns, and replies still
  /// on their way touch nothing (the backend may be gone by then).
  ~renewal_service() { impl_->stop(); }
  renewal_service(const renewal_service&) = delete;
  renewal_service& operator=(const renewal_service&) = delete;

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
    impl_->put(rec.get(), entry{rec, std::move(call), read, period, due}, due);
  }

  /// Stops renewing `rec`.
  void remove(const hold_record* rec) { impl_->remove(rec); }
  std::size_t size() const { return impl_->size(); }
  /// Round trips sent so far, and scripts in them (for tests and benchmarks).
  std::size_t batches_sent() const { return impl_->batches.load(); }
  std::size_t renewals_sent() const { return impl_->renewals.load(); }
  /// Times its timer loop has stepped (see timer_loop::steps).
  std::size_t steps() const { return impl_->steps(); }

 private:
  // One renewal in a sent batch: whose (its reply has the same index).
  struct sent_renewal {
    const hold_record* key;
    std::weak_ptr<hold_record> record;
  };

  struct entry {
    std::weak_ptr<hold_record> record;
    script_call call;
    renewal_reader read;
    milliseconds period;
    steady::time_point next_due;
  };

  struct impl final : timer_loop<entry> {
    explicit impl(B& b) : timer_loop<entry>(b.get_executor()), backend(b) {}
    using timer_loop<entry>::m, timer_loop<entry>::stopped, timer_loop<entry>::entries;

    B& backend;
    std::atomic<std::size_t> batches{0}, renewals{0};

    // Sends what is due; returns when the next entry is due.
    steady::time_point step() override {
      send_due();
      std::lock_guard g(m);
      return this->earliest_due();
    }

    // When at least one entry is due, sends one pipeline with every entry
    // due within half its period (so N locks share a round trip). Nothing
    // is sent early when nothing is due: a wake-up after each reply would
    // otherwise renew every round trip once that is over half the period.
    void send_due() {
      std::lock_guard g(m);
      if (stopped) return;
      auto now = steady::now();
      if (!this->any_due(now)) return;
      std::vector<sent_renewal> batch;
      std::vector<script_call> calls;
      for (auto it = entries.begin(); it != entries.end();) {
        auto& [key, e] = *it;
        // A hold signalled lost is not kept alive: its holder has stopped
        // trusting it, and the key should lapse rather than outlive that.
        if (auto rec = e.record.lock(); !rec || rec->lost()) {
          it = entries.erase(it);
          continue;
        }
        if (e.next_due > now + e.period / 2) {
          ++it;
          continue;
        }
        batch.push_back(sent_renewal{key, e.record});
        calls.push_back(e.call);
        // Not due again until this reply (or its failure) reschedules it.
        e.next_due = now + e.period;
        ++it;
      }
      if (batch.empty()) return;
      ++batches;
      renewals += batch.size();
      // One round trip; a script the connection has not loaded yet is
      // loaded in the same pipeline (at a slow link, an extra NOSCRIPT
      // round trip could outlast the lease).
      backend.async_eval_all(std::move(calls), [self = std::static_pointer_cast<impl>(this->shared_from_this()),
                                                batch = std::move(batch),
                                                sent = now](error_code ec, std::vector<redis::value> r) {
        self->on_replies(batch, sent, ec, r);
      });
    }

    void on_replies(const std::vector<sent_renewal>& batch, steady::time_point sent, error_code ec,
                    const std::vector<redis::value>& replies) {
      std::vector<std::shared_ptr<hold_record>> lost;
      {
        std::lock_guard g(m);
        if (stopped) return;
        for (std::size_t i = 0; i < batch.size(); ++i) {
          auto it = entries.find(batch[i].key);
          if (it == entries.end()) continue;  // released meanwhile
          // The same address may belong to a newer hold by now: the reply is
          // about the record it was sent for, or about nothing.
          const auto& sent_for = batch[i].record;
          if (!same_owner(sent_for, it->second.record)) continue;
          auto rec = it->second.record.lock();
          if (!rec) {
            entries.erase(it);
            continue;
          }
          const redis::value* v = ec || i >= replies.size() ? nullptr : &replies[i];
          if (v && redis::detail::is_noscript(*v)) {
            // The server lost its scripts (SCRIPT FLUSH, failover): the
            // call did not run; the next batch loads it again, now.
            it->second.next_due = steady::now();
            continue;
          }
          const auto verdict = v ? it->second.read(*v) : renewal_verdict::no_verdict;
          if (verdict == renewal_verdict::renewed) {
            if (rec->confirm(sent)) {
              // A later renewal may be on its way already (a round trip as
              // long as the period): never pull its schedule back.
              it->second.next_due = std::max(it->second.next_due, sent + it->second.period);
            } else {
              entries.erase(it);  // signalled lost before this came: stays lost
            }
          } else if (verdict == renewal_verdict::gone) {
            lost.push_back(rec);  // the key is gone or someone else's
            entries.erase(it);
          } else {
            // Not confirmed (connection down, outcome unknown, an unexpected
            // reply): no verdict, try again soon. If no renewal is confirmed
            // before the loss deadline, the lease watch signals the loss.
            it->second.next_due = steady::now() + std::min(it->second.period / 4, milliseconds(1000));
          }
        }
      }
      for (auto& rec : lost) rec->mark_lost();
      this->wake();  // every entry of the batch got a new due time
    }
  };

  std::shared_ptr<impl> impl_;
};

}  // namespace dlock::detail
