// Running Lua scripts on a connection: one call or many in one round trip,
// each by SHA, loaded on the connection's first use of it (script_cache.hpp).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>

#include <dlock/redis/connection.hpp>

namespace dlock::redis {

namespace detail {

// The reply of each call of a pipeline that script_cache::push encoded (at
// `at`): its EVALSHA's reply, or the SCRIPT LOAD's error when the load
// failed. A NOSCRIPT reply makes the cache forget the script.
inline std::pair<error_code, std::vector<value>> call_replies(script_cache& scripts,
                                                               const std::vector<script_call>& calls,
                                                               const std::vector<script_cache::slot>& at,
                                                               response& r) {
  std::vector<value> out;
  out.reserve(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    auto reply = at[i].reply;
    if (reply >= r.size()) return {make_error_code(error::unexpected_reply), {}};
    if (is_noscript(r[reply])) {
      scripts.forget(*calls[i].script);
      // The load itself failed (a script that does not compile): its error
      // says more than NOSCRIPT.
      if (at[i].loads && r[reply - 1].is_error()) reply -= 1;
    }
    out.push_back(std::move(r[reply]));
  }
  return {error_code{}, std::move(out)};
}
}  // namespace detail

/// Runs every call in `calls` in one pipeline on `conn` (one round trip)
/// and completes with one reply per call, in order. A script that `conn`
/// has not loaded yet is loaded by a SCRIPT LOAD ahead of its EVALSHA in the
/// same pipeline (see detail::script_cache).
///
/// Completion signature: `void(error_code, std::vector<value>)`: on success
/// one value per call (error replies are values of kind::error: calls may
/// fail one by one); otherwise the connection's errors (see
/// connection::async_exec), notably outcome_unknown, and no values. A
/// NOSCRIPT reply (the server lost its scripts: SCRIPT FLUSH, a failover)
/// is given back as it is, since that call did not run; the script is loaded
/// again with its next run. Cancellation: as connection::async_exec.
template <class CompletionToken>
auto async_eval_all(connection& conn, std::vector<script_call> calls, CompletionToken&& token) {
  return asio::async_compose<CompletionToken, void(error_code, std::vector<value>)>(
      [&conn, calls = std::move(calls), at = std::vector<detail::script_cache::slot>(), posted = false](
          auto& self, error_code ec = {}, response r = {}) mutable {
        if (calls.empty() && !ec && r.empty() && !std::exchange(posted, true)) {
          asio::post(conn.get_executor(), std::move(self));  // nothing to send: complete, never inline
          return;
        }
        if (at.empty() && !calls.empty()) {
          // Encoded when the operation starts, so that what the cache
          // records as loaded is what this pipeline sends.
          request req;
          for (auto& c : calls) at.push_back(conn.scripts().push(req, c));
          conn.async_exec(std::move(req), std::move(self));
          return;
        }
        if (ec) return self.complete(ec, std::vector<value>{});
        auto [e, out] = detail::call_replies(conn.scripts(), calls, at, r);
        self.complete(e, std::move(out));
      },
      token, conn.get_executor());
}

/// Runs `s` with `keys` and `args` on `conn`.
///
/// Completion signature: `void(error_code, value)`: the script's reply; on
/// error::server_error the value is the error reply, whose `str` is the
/// server's message; otherwise the connection's errors (see
/// connection::async_exec), notably outcome_unknown.
/// A NOSCRIPT reply (the call did not run: SCRIPT FLUSH, a failover) is
/// answered by one EVAL of the script's source, transparently: unlike a
/// second EVALSHA it cannot meet NOSCRIPT again, and it needs no SCRIPT
/// LOAD permission.
/// Cancellation: as connection::async_exec.
template <class CompletionToken>
auto async_eval(connection& conn, const script& s, std::vector<std::string> keys,
                std::vector<std::string> args, CompletionToken&& token) {
  return asio::async_compose<CompletionToken, void(error_code, value)>(
      [&conn, call = script_call{&s, std::move(keys), std::move(args)}, tries = 0](
          auto& self, error_code ec = {}, std::vector<value> r = {}) mutable {
        if (tries++ == 0) {
          async_eval_all(conn, {call}, std::move(self));
          return;
        }
        if (tries == 2 && !ec && r.size() == 1 && detail::is_noscript(r[0])) {
          request req;
          detail::push_eval(req, "EVAL", call.script->source(), call.keys, call.args);
          conn.async_exec(std::move(req), std::move(self));
          return;
        }
        auto [e, v] = detail::single_reply(ec, r);
        self.complete(e, std::move(v));
      },
      token, conn.get_executor());
}

/// Runs one command and completes with its single reply.
/// Completion signature: `void(error_code, value)`, as async_eval.
template <class CompletionToken>
auto async_command(connection& conn, request req, CompletionToken&& token) {
  return asio::async_compose<CompletionToken, void(error_code, value)>(
      [&conn, req = std::move(req), sent = false](auto& self, error_code ec = {},
                                                  response r = {}) mutable {
        if (!sent) {
          sent = true;
          conn.async_exec(std::move(req), std::move(self));
          return;
        }
        auto [e, v] = detail::single_reply(ec, r);
        self.complete(e, std::move(v));
      },
      token, conn.get_executor());
}

}  // namespace dlock::redis
