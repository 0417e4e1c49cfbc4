// The batching engine under the watchdog's renewals and the hand-off's
// entry refreshes: one timer per backend, every entry due within half its
// period sent together in one pipelined round trip, each reply matched to
// the entries it answers and read by the policy that sent it.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <dlock/concepts.hpp>
#include <dlock/detail/timer_loop.hpp>

namespace dlock::detail {

/// One entry per hold. `Traits` says what differs between the engines:
/// - `record`: the record type the entries are kept for;
/// - `item`: what an entry sends (its script, or its part of one);
/// - `grouped` and `group_of(item)`: whether entries of one group share one
///   script (the refreshes of one lock's waiters, the renewals of one
///   ownership's holds on one slot) or each sends its own; an empty group
///   sends alone. A group holds at most `limit()` entries (0: no limit);
///   more are split into several calls;
/// - `call(items)`: the script for a group (or one entry);
/// - `reading`, `reader(items)` and `read(reading, reply, n)`: how a reply
///   reads, as one renewal_verdict per entry of its group; the reading is
///   taken when the batch is sent;
/// - `keep(record)`: whether an entry is still worth sending (the watchdog
///   drops a hold signalled lost);
/// - `renewed(record, item, entry, sent)` -> bool: a "renewed" verdict, for
///   a batch sent at `sent`; false drops the entry;
/// - `gone(record, item)` -> gone_action: a "gone" verdict;
/// - `no_answer(item, entry, now)`: no verdict came (the entry is due again
///   soon; this may do more, under the mutex);
/// - `signal(record)`: runs outside the mutex for a gone_action::signal;
/// - `acknowledged`: on a backend that acknowledges writes, each batch goes
///   with a WAIT behind it, and a "renewed" verdict of a batch that too few
///   replicas acknowledged counts as no verdict (a "gone" one stands: the
///   master has no such key).
/// "No verdict" (a dropped connection, an unreadable reply) makes the entry
/// due again soon; NOSCRIPT (the server lost its scripts: the call did not
/// run) makes it due at once, and the next batch loads the script again.
enum class gone_action { keep, drop, signal };

/// One entry of a script_batches: for which record, what it sends, how
/// often, and when next.
template <class Record, class Item>
struct batch_entry {
  std::weak_ptr<Record> rec;
  Item what;
  milliseconds period;
  steady::time_point next_due;
};

template <class B, class Traits>
class script_batches {
 public:
  using record = typename Traits::record;
  using item = typename Traits::item;

  using entry = batch_entry<record, item>;

  explicit script_batches(B& backend) : impl_(std::make_shared<impl>(backend)) { impl_->start(); }
  /// Stops at once: no batch is sent after this returns, and replies still
  /// on their way touch nothing (the backend may be gone by then).
  ~script_batches() { impl_->stop(); }
  script_batches(const script_batches&) = delete;
  script_batches& operator=(const script_batches&) = delete;

  /// Sends `what` for `rec` every `period`, the first time at `due`, until
  /// removed (or until the record is gone).
  void put(const std::shared_ptr<record>& rec, item what, milliseconds period, steady::time_point due) {
    impl_->put(rec.get(), entry{rec, std::move(what), period, due}, due);
  }
  /// Stops sending for `rec`: no batch queued after this returns names it.
  void remove(const hold_record* rec) { impl_->remove(rec); }
  std::size_t size() const { return impl_->size(); }
  /// Round trips sent so far, and entries sent in them.
  std::size_t batches_sent() const { return impl_->batches.load(); }
  std::size_t entries_sent() const { return impl_->sent.load(); }
  /// Script calls sent so far (a round trip carries one per group).
  std::size_t calls_sent() const { return impl_->calls_out.load(); }
  /// Times its timer loop has stepped (see timer_loop::steps).
  std::size_t steps() const { return impl_->steps(); }
  /// At most `n` entries per script call from the next batch on (0: no
  /// limit; 1: every entry its own call).
  void limit(std::size_t n) { impl_->limit = n; }
  std::size_t limit() const { return impl_->limit.load(); }

 private:
  // One entry in a sent script: whose (its verdict has the same index).
  struct sent_entry {
    const hold_record* key;
    std::weak_ptr<record> rec;
  };
  struct sent_group {
    std::vector<sent_entry> members;
    typename Traits::reading reading;
  };

  struct impl final : timer_loop<entry> {
    explicit impl(B& b) : timer_loop<entry>(b.get_executor()), backend(b) {}
    using timer_loop<entry>::m, timer_loop<entry>::stopped, timer_loop<entry>::entries;

    B& backend;
    std::atomic<std::size_t> batches{0}, sent{0}, calls_out{0};
    std::atomic<std::size_t> limit{0};

    steady::time_point step() override {
      send_due();
      std::lock_guard g(m);
      return this->earliest_due();
    }

    // When at least one entry is due, sends one pipeline with every entry
    // due within half its period. Nothing is sent early when nothing is
    // due: a wake-up after each reply would otherwise send every round trip
    // once that is over half the period.
    void send_due() {
      std::lock_guard g(m);
      if (stopped) return;
      auto now = steady::now();
      if (!this->any_due(now)) return;
      std::vector<sent_group> groups;
      std::vector<std::vector<const item*>> items;
      std::map<std::string, std::size_t, std::less<>> by_group;  // a group's call still open to more
      const std::size_t most = limit.load();
      for (auto it = entries.begin(); it != entries.end();) {
        auto& [key, e] = *it;
        if (auto rec = e.rec.lock(); !rec || !Traits::keep(*rec)) {
          it = entries.erase(it);
          continue;
        }
        if (e.next_due <= now + e.period / 2) {
          std::size_t at = groups.size();
          if constexpr (Traits::grouped) {
            if (const auto& g = Traits::group_of(e.what); !g.empty()) {
              auto [where, fresh] = by_group.try_emplace(g, groups.size());
              if (!fresh && most && items[where->second].size() >= most) where->second = groups.size();  // full: a new call
              at = where->second;
            }
          }
          if (at == groups.size()) {
            groups.emplace_back();
            items.emplace_back();
          }
          groups[at].members.push_back(sent_entry{key, e.rec});
          items[at].push_back(&e.what);
          e.next_due = now + e.period;  // until this reply (or its failure) says otherwise
        }
        ++it;
      }
      if (groups.empty()) return;
      std::vector<script_call> calls;
      calls.reserve(groups.size());
      for (std::size_t c = 0; c < items.size(); ++c) {
        calls.push_back(Traits::call(items[c]));
        groups[c].reading = Traits::reader(items[c]);
        sent += items[c].size();
      }
      ++batches;
      calls_out += items.size();
      // One round trip; a script the connection has not loaded yet is
      // loaded in the same pipeline (at a slow link, an extra NOSCRIPT
      // round trip could outlast a lease).
      auto self = std::static_pointer_cast<impl>(this->shared_from_this());
      if constexpr (Traits::acknowledged && contract::backend_acknowledging<B>) {
        if (backend.acknowledges()) {
          backend.async_eval_all_acknowledged(
              std::move(calls), [self, groups = std::move(groups), at = now](std::vector<redis::call_result> r,
                                                                             redis::replica_acks acks) {
                self->on_replies(groups, at, r, acks.met());
              });
          return;
        }
      }
      backend.async_eval_all(std::move(calls), [self, groups = std::move(groups),
                                                at = now](std::vector<redis::call_result> r) {
        self->on_replies(groups, at, r, true);
      });
    }

    // Each call has its own result: a server that could not be reached
    // costs only the verdicts of its own calls.
    void on_replies(const std::vector<sent_group>& groups, steady::time_point at,
                    const std::vector<redis::call_result>& results, bool acknowledged) {
      std::vector<std::shared_ptr<record>> signalled;
      {
        std::lock_guard g(m);
        if (stopped) return;
        auto now = steady::now();
        for (std::size_t c = 0; c < groups.size(); ++c) {
          const auto& members = groups[c].members;
          const redis::value* v = c >= results.size() || results[c].ec ? nullptr : &results[c].reply;
          bool noscript = v && redis::detail::is_noscript(*v);
          const auto verdicts = v && !noscript ? Traits::read(groups[c].reading, *v, members.size())
                                               : std::vector<renewal_verdict>{};
          for (std::size_t i = 0; i < members.size(); ++i) {
            auto it = entries.find(members[i].key);
            if (it == entries.end()) continue;  // removed meanwhile
            // The same address may belong to a newer hold by now: the reply
            // is about the record it was sent for, or about nothing.
            if (!same_owner(members[i].rec, it->second.rec)) continue;
            auto rec = it->second.rec.lock();
            if (!rec) {
              entries.erase(it);
              continue;
            }
            auto& e = it->second;
            auto verdict = i < verdicts.size() ? verdicts[i] : renewal_verdict::no_verdict;
            if (verdict == renewal_verdict::renewed && !acknowledged) verdict = renewal_verdict::no_verdict;
            if (noscript) {
              e.next_due = now;  // the call did not run: the next batch loads it again, now
            } else if (verdict == renewal_verdict::renewed) {
              if (!Traits::renewed(*rec, e.what, e, at)) entries.erase(it);
            } else if (verdict == renewal_verdict::gone) {
              auto action = Traits::gone(*rec, e.what);
              if (action == gone_action::signal) signalled.push_back(rec);
              if (action != gone_action::keep) entries.erase(it);
            } else {
              e.next_due = now + std::min(e.period / 4, milliseconds(1000));
              Traits::no_answer(e.what, e, now);
            }
          }
        }
      }
      for (auto& rec : signalled) Traits::signal(*rec);
      this->wake();  // every entry of the batch got a new due time
    }
  };

  std::shared_ptr<impl> impl_;
};

}  // namespace dlock::detail
