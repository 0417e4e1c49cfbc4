// The requests of one connection, from the caller's hand to their last reply:
// what waits to be written, what awaits replies, and what each ends with.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/detail/exec_op.hpp>

#include "connect_error.hpp"

namespace dlock::redis::detail {

// No sockets and no clocks: the connection passes the time in and moves the
// bytes, so every rule here can be checked with scripted times and replies.
// A request ends exactly once; one written may have run, so from then on it
// can only end with its replies or with outcome_unknown.
class request_queue {
 public:
  using clock = std::chrono::steady_clock;
  using error_code = boost::system::error_code;
  using op_ptr = std::shared_ptr<exec_op>;

  // The requests of one write, coalesced.
  struct batch {
    std::string payload;
    std::size_t requests = 0;
    std::size_t commands = 0;
  };

  // The fate of one reply.
  struct match {
    bool stray = false;  // nothing was awaiting a reply: the stream is out of step
    op_ptr finished;     // the request this reply was the last one of, if any
  };

  explicit request_queue(clock::duration command_timeout) : command_timeout_(command_timeout) {}

  // Takes a request in, due one command timeout after `now`. It fails at
  // once after shut_down(), or while connects are refused (see
  // connect_failed); one of no commands succeeds at once; one cancelled on
  // its way is dropped. True when it was queued: a writer has work.
  bool add(op_ptr op, clock::time_point now) {
    if (op->state == exec_op::stage::done) return false;
    if (shutting_down_ || refusing_) {
      finish(*op, shutting_down_ ? error_code(error::shutting_down) : connect_error_);
      return false;
    }
    if (op->expected == 0) {
      finish(*op, {});
      return false;
    }
    op->deadline = now + command_timeout_;
    queued_.push_back(std::move(op));
    return true;
  }

  // A cancellation: a request not yet written is taken back (also one that
  // has not reached add() yet: add() then drops it); a written one cannot
  // be, and ends as usual.
  void cancel(const op_ptr& op) {
    if (!op || op->state != exec_op::stage::queued) return;
    op->state = exec_op::stage::done;
    std::erase(queued_, op);
    op->complete(boost::asio::error::operation_aborted, {});
  }

  bool has_queued() const noexcept { return !queued_.empty(); }
  // New requests fail at once (see add()).
  bool refusing() const noexcept { return refusing_; }

  // stop() was called: no request is taken in any more.
  void shut_down() noexcept { shutting_down_ = true; }

  // A connection is up: the last connect error is history.
  void connected() noexcept {
    connect_error_ = {};
    refusing_ = refusal_until_attempt_ = false;
  }

  // A connect attempt begins. A refusal that connect_failed() was asked
  // for (`refuse`: a replica where a master must be) ends here: requests
  // from now on wait for this attempt, which may find a master again (a
  // failback). A permanent error (a wrong password) goes on refusing.
  void connecting() noexcept {
    if (refusal_until_attempt_) refusing_ = refusal_until_attempt_ = false;
  }

  // A connect failed with `ec`, one of dlock's connection errors. Queued
  // requests wait for the next attempt (and report `ec` if their time runs
  // out first) unless retrying cannot help soon: `give_up`; or a permanent
  // error such as a wrong password, which fails new requests at once as
  // well, until a connection is up; or `refuse`, which does the same until
  // the next connect attempt begins (connecting()).
  void connect_failed(error_code ec, bool give_up, bool refuse = false) {
    connect_error_ = ec;
    refusal_until_attempt_ = refuse && !is_permanent(ec);
    refusing_ = refuse || is_permanent(ec);
    if (give_up || refusing_) fail_queued(ec);
  }

  // Every queued request, coalesced into `out` for one write. From here on
  // each may reach the server: a failure is outcome_unknown, never "not
  // sent", unless unwrite() says no byte left.
  void take_batch(clock::time_point now, batch& out) {
    out.payload.clear();
    out.requests = 0;
    out.commands = 0;
    while (!queued_.empty()) {
      auto op = std::move(queued_.front());
      queued_.pop_front();
      if (op->state != exec_op::stage::queued) continue;
      op->state = exec_op::stage::written;
      op->written_at = now;
      out.payload += op->payload;
      out.commands += op->expected;
      written_.push_back(std::move(op));
      ++out.requests;
    }
  }

  // The write of `b`, the latest batch, failed before one byte left: none of
  // it reached the server, so it goes back to the front of the queue, in
  // order, for the next connection.
  void unwrite(const batch& b) {
    for (std::size_t count = b.requests; count > 0 && !written_.empty(); --count) {
      auto op = std::move(written_.back());
      written_.pop_back();
      if (op->state != exec_op::stage::written) continue;  // timed out meanwhile
      op->state = exec_op::stage::queued;
      queued_.push_front(std::move(op));
    }
  }

  // Matches one reply, in order, to the oldest written request; one of N
  // commands ends with its Nth reply (unless it timed out before).
  match take_reply(value&& v) {
    if (written_.empty()) return {.stray = true, .finished = nullptr};
    auto& op = written_.front();
    op->replies.push_back(std::move(v));
    if (op->replies.size() < op->expected) return {};
    auto done = std::move(op);
    written_.pop_front();
    if (done->state != exec_op::stage::done) {
      done->state = exec_op::stage::done;
      done->complete({}, std::move(done->replies));
    }
    return {.stray = false, .finished = std::move(done)};
  }

  // The connection is gone: what was written and not answered may or may
  // not have run; what was never written stays queued for the next one.
  void connection_lost() { fail_written(error::outcome_unknown); }

  // Ends the requests whose command timeout passed by `now`: a written one
  // with outcome_unknown (kept, so that its late reply is matched and
  // dropped), a queued one with the last connect error if the last connect
  // failed, else command_timeout. Gives when to look again: the next
  // deadline, and never later than one timeout from now, so a request added
  // meanwhile needs no earlier look.
  clock::time_point expire(clock::time_point now) {
    auto next = clock::time_point::max();
    // Requests come in order with one timeout, so the earliest deadline is
    // always at a front.
    for (auto& op : written_) {
      if (op->state == exec_op::stage::done) continue;
      if (op->deadline > now) {
        next = std::min(next, op->deadline);
        break;
      }
      finish(*op, error::outcome_unknown);
    }
    while (!queued_.empty() &&
           (queued_.front()->state == exec_op::stage::done || queued_.front()->deadline <= now)) {
      auto op = std::move(queued_.front());
      queued_.pop_front();
      if (op->state == exec_op::stage::done) continue;
      finish(*op, connect_error_ ? connect_error_ : error_code(error::command_timeout));
    }
    if (!queued_.empty()) next = std::min(next, queued_.front()->deadline);
    return std::min(next, now + command_timeout_);
  }

  // Nothing to write and nothing awaiting a reply.
  bool idle() const noexcept { return queued_.empty() && written_.empty(); }

  // When the oldest request still awaiting a reply was written (one that
  // timed out counts: its reply is still due).
  std::optional<clock::time_point> oldest_unanswered() const {
    if (written_.empty()) return std::nullopt;
    return written_.front()->written_at;
  }

  void fail_queued(error_code ec) { fail(queued_, ec); }
  void fail_written(error_code ec) { fail(written_, ec); }
  void fail_all(error_code queued_ec, error_code written_ec) {
    fail_written(written_ec);
    fail_queued(queued_ec);
  }

 private:
  static void finish(exec_op& op, error_code ec) {
    op.state = exec_op::stage::done;
    op.complete(ec, {});
  }

  // Empties `q` before the first completion, so that it is consistent
  // whatever a completion does.
  static void fail(std::deque<op_ptr>& q, error_code ec) {
    auto ops = std::move(q);
    q.clear();
    for (auto& op : ops) {
      if (op->state != exec_op::stage::done) finish(*op, ec);
    }
  }

  clock::duration command_timeout_;
  bool shutting_down_ = false;
  error_code connect_error_;  // of the last connect, when it failed
  bool refusing_ = false;     // it failed so that new requests fail at once
  bool refusal_until_attempt_ = false;  // ...until the next connect attempt
  std::deque<op_ptr> queued_;   // not yet written
  std::deque<op_ptr> written_;  // written, awaiting replies
};

}  // namespace dlock::redis::detail
