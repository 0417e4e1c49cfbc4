// The connection's run loop as a state machine without I/O: which step comes
// next (find the address, connect and greet, serve, wait), what a failure
// reports, and how long to back off. The connection performs each step and
// feeds its outcome back; the decisions are tested here without a socket.
#pragma once

#include <chrono>
#include <string>

#include <boost/system/error_code.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>

#include "connect_error.hpp"
#include "reconnect_backoff.hpp"

namespace dlock::redis::detail {

/// Where to connect: for one server, the settings' own address; when the
/// settings have an address_source (Sentinel's "where is the master?"), what
/// it answers in the `resolve` step.
using server_address = address;

class run_fsm {
 public:
  using duration = std::chrono::milliseconds;

  enum class step {
    resolve,  ///< find the address to connect to
    connect,  ///< open the socket and run the handshake, within the connect timeout
    serve,    ///< read, write and check health until the connection breaks
    wait,     ///< sleep `wait`, then resolve again
    done,     ///< stopped: fail what is left and end
  };

  /// What to do next. Before it, when `report` is set, tell the queued
  /// requests and the connect waiters that connecting failed with `report`
  /// (one of dlock's connection errors; `give_up`: queued requests fail
  /// now rather than wait for the next attempt).
  struct action {
    step next = step::done;
    duration wait{0};
    boost::system::error_code report{};
    bool give_up = false;
  };

  run_fsm(duration first_wait, duration max_wait) : backoff_(first_wait, max_wait) {}

  /// The loop begins.
  action start() { return go(step::resolve); }

  /// The address was found, or not (`ec`).
  action resolved(const boost::system::error_code& ec) { return ec ? failed(to_connect_error(ec), false) : go(step::connect); }

  /// The socket was opened and the handshake answered, or not (`ec`).
  action connected(const boost::system::error_code& ec) {
    if (ec) return failed(to_connect_error(ec), false);
    served_once_ = true;
    return go(step::serve);
  }

  /// The connection that served broke: connect again soon.
  action served() { return go(step::wait, backoff_.after_success()); }

  /// The wait is over.
  action waited() { return go(step::resolve); }

  /// A step threw (say, Asio refusing the endpoint, or a connect handler
  /// that threw). Retrying may well throw again, so nothing waits for it.
  action threw() { return failed(error::not_connected, true); }

  /// stop() was called: from now on every answer is `done`.
  void request_stop() noexcept { stopping_ = true; }
  bool stopping() const noexcept { return stopping_; }
  /// Whether a connection has ever served (for diagnostics and tests).
  bool served_once() const noexcept { return served_once_; }

 private:
  action go(step s, duration wait = duration{0}) {
    if (stopping_) return {step::done};
    return {s, wait};
  }
  action failed(boost::system::error_code report, bool give_up) {
    auto a = go(step::wait, backoff_.after_failure());
    if (a.next != step::done) {
      a.report = report;
      a.give_up = give_up;
    }
    return a;
  }

  reconnect_backoff backoff_;
  bool stopping_ = false;
  bool served_once_ = false;
};

}  // namespace dlock::redis::detail
