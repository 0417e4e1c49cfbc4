// wait::HandOff's entry refreshes, batched per backend: one timer keeps
// every queued waiter of the backend alive in its lock's line, with one
// script per lock per round and every lock's script in one pipeline.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <dlock/concepts.hpp>
#include <dlock/detail/timer_loop.hpp>

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
  explicit queue_refresher(B& backend) : impl_(std::make_shared<impl>(backend)) { impl_->start(); }
  /// Stops at once: no batch is sent after this returns, and replies still
  /// on their way touch nothing.
  ~queue_refresher() { impl_->stop(); }
  queue_refresher(const queue_refresher&) = delete;
  queue_refresher& operator=(const queue_refresher&) = delete;

  using record = record_t<O>;

  /// Refreshes `rec`'s entry (token `rec->owner` in the line of
  /// `rec->name`, life `rec->state.entry_ttl`) every `rec->state.refresh`,
  /// the first time one period from now (its try just refreshed it), until
  /// removed. `poke` wakes its waiter to try again; it must not block.
  void add(const std::shared_ptr<record>& rec, std::function<void()> poke) {
    auto period = std::max(rec->state.refresh, milliseconds(1));
    auto due = steady::now() + period;
    impl_->put(rec.get(),
               entry{rec, rec->name, rec->owner, rec->state.entry_ttl, period, due, steady::now(), std::move(poke)}, due);
  }

  /// Stops refreshing `rec`'s entry.
  void remove(const hold_record* rec) { impl_->remove(rec); }
  std::size_t size() const { return impl_->size(); }
  /// Round trips sent so far, and entries refreshed in them (for tests).
  std::size_t batches_sent() const { return impl_->batches.load(); }
  std::size_t refreshes_sent() const { return impl_->refreshes.load(); }

 private:
  struct entry {
    std::weak_ptr<record> rec;
    std::string name, token;
    milliseconds ttl, period;
    steady::time_point next_due;
    steady::time_point refreshed;  // send time of the last refresh confirmed (or of the try before add)
    std::function<void()> poke;
  };
  // One waiter in a sent script: whose (its answer has the same index).
  struct sent_refresh {
    const hold_record* key;
    std::weak_ptr<record> rec;
  };

  struct impl final : timer_loop<entry> {
    explicit impl(B& b) : timer_loop<entry>(b.get_executor()), backend(b) {}
    using timer_loop<entry>::m, timer_loop<entry>::stopped, timer_loop<entry>::entries;

    B& backend;
    std::atomic<std::size_t> batches{0}, refreshes{0};

    steady::time_point step() override {
      send_due();
      std::lock_guard g(m);
      return this->earliest_due();
    }

    // When an entry is due, sends every entry due within half its period:
    // one script per lock, in one pipeline.
    void send_due() {
      std::lock_guard g(m);
      if (stopped) return;
      auto now = steady::now();
      if (!this->any_due(now)) return;
      std::map<std::string, std::vector<std::pair<std::string, milliseconds>>> waiters;  // by lock
      std::map<std::string, std::vector<sent_refresh>> whose;
      for (auto it = entries.begin(); it != entries.end();) {
        auto& [key, e] = *it;
        if (e.rec.expired()) {
          it = entries.erase(it);
          continue;
        }
        if (e.next_due <= now + e.period / 2) {
          waiters[e.name].emplace_back(e.token, e.ttl);
          whose[e.name].push_back(sent_refresh{key, e.rec});
          e.next_due = now + e.period;  // until this reply (or its failure) says otherwise
        }
        ++it;
      }
      std::vector<script_call> calls;
      std::vector<std::vector<sent_refresh>> batch;
      for (auto& [name, list] : waiters) {
        calls.push_back(O::refresh_call(name, list));
        refreshes += list.size();
        batch.push_back(std::move(whose[name]));
      }
      if (calls.empty()) return;
      ++batches;
      backend.async_eval_all(std::move(calls), [self = std::static_pointer_cast<impl>(this->shared_from_this()),
                                                batch = std::move(batch),
                                                sent = now](error_code ec, std::vector<redis::value> r) {
        self->on_replies(batch, sent, ec, r);
      });
    }

    // Pokes run under the mutex: once remove() returns, no poke of that
    // waiter can still be on its way to an executor that may be gone.
    // (A poke only posts.)
    void on_replies(const std::vector<std::vector<sent_refresh>>& batch, steady::time_point sent, error_code ec,
                    const std::vector<redis::value>& replies) {
      {
        std::lock_guard g(m);
        if (stopped) return;
        auto now = steady::now();
        for (std::size_t c = 0; c < batch.size(); ++c) {
          const redis::value* v = ec || c >= replies.size() ? nullptr : &replies[c];
          bool noscript = v && redis::detail::is_noscript(*v);
          // The ownership reads its reply (one verdict per waiter, or none).
          const auto verdicts = v && !noscript ? O::read_refresh(*v, batch[c].size()) : std::vector<renewal_verdict>{};
          for (std::size_t i = 0; i < batch[c].size(); ++i) {
            auto it = entries.find(batch[c][i].key);
            if (it == entries.end()) continue;  // its wait ended meanwhile
            // The same address may belong to a newer waiter by now.
            const auto& sent_for = batch[c][i].rec;
            if (!same_owner(sent_for, it->second.rec)) continue;
            auto rec = it->second.rec.lock();
            if (!rec) {
              entries.erase(it);
              continue;
            }
            const auto verdict = i < verdicts.size() ? verdicts[i] : renewal_verdict::no_verdict;
            auto& e = it->second;
            if (verdict == renewal_verdict::renewed) {
              rec->state.note_queued(sent);  // still waiting when this ran
              e.refreshed = std::max(e.refreshed, sent);
            } else if (verdict == renewal_verdict::gone) {
              e.poke();  // granted (its message lost) or out of the line: its own try settles it
            } else if (noscript) {
              // The server lost its scripts: this call did not run; the
              // next batch loads it again, now.
              e.next_due = now;
            } else {
              // No answer (a slow or dropped connection): try again soon,
              // batched still; only an entry close to lapsing makes its
              // waiter refresh it with a try of its own.
              e.next_due = now + std::min(e.period / 4, milliseconds(1000));
              if (now - e.refreshed >= e.ttl - e.period) e.poke();
            }
          }
        }
      }
      this->wake();
    }
  };

  std::shared_ptr<impl> impl_;
};

}  // namespace dlock::detail
