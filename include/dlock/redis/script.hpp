// Lua scripts run by SHA: EVALSHA first, and on NOSCRIPT (after SCRIPT FLUSH,
// a restart or a failover) EVAL, which runs the script and caches it again.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/compose.hpp>

#include <dlock/redis/connection.hpp>

namespace dlock::redis {

/// A Lua script and its SHA-1. Keys and values reach it only as KEYS and
/// ARGV: its text is fixed when it is built and never spliced with data.
class script {
 public:
  explicit script(std::string source) : source_(std::move(source)), sha1_(sha1_hex(source_)) {}

  const std::string& source() const noexcept { return source_; }
  const std::string& sha1() const noexcept { return sha1_; }

 private:
  std::string source_;
  std::string sha1_;
};

namespace detail {

inline bool is_noscript(const value& v) {
  return v.is_error() && v.str.compare(0, 8, "NOSCRIPT") == 0;
}

inline request make_eval(std::string_view verb, std::string_view body,
                         const std::vector<std::string>& keys,
                         const std::vector<std::string>& args) {
  std::vector<std::string_view> parts;
  parts.reserve(3 + keys.size() + args.size());
  std::string count = std::to_string(keys.size());
  parts.push_back(verb);
  parts.push_back(body);
  parts.push_back(count);
  for (auto& k : keys) parts.push_back(k);
  for (auto& a : args) parts.push_back(a);
  request req;
  req.push_args(parts);
  return req;
}

// The reply of one command as (error, value): an error reply becomes
// server_error with the reply (and so the server's text) as the value.
inline std::pair<error_code, value> single_reply(error_code ec, response& r) {
  if (ec) return {ec, value{}};
  if (r.size() != 1) return {make_error_code(error::unexpected_reply), value{}};
  if (r[0].is_error()) return {make_error_code(error::server_error), std::move(r[0])};
  return {{}, std::move(r[0])};
}

}  // namespace detail

/// Runs `s` with `keys` and `args` on `conn`.
///
/// Completion signature: `void(error_code, value)`: the script's reply; on
/// error::server_error the value is the error reply, whose `str` is the
/// server's message; otherwise the connection's errors (see
/// connection::async_exec), notably outcome_unknown.
/// A NOSCRIPT reply is answered by one EVAL of the source, transparently.
/// Cancellation: as connection::async_exec.
template <class CompletionToken>
auto async_eval(connection& conn, const script& s, std::vector<std::string> keys,
                std::vector<std::string> args, CompletionToken&& token) {
  enum class phase { start, evalsha, eval };
  return asio::async_compose<CompletionToken, void(error_code, value)>(
      [&conn, &s, keys = std::move(keys), args = std::move(args), at = phase::start](
          auto& self, error_code ec = {}, response r = {}) mutable {
        switch (at) {
          case phase::start:
            at = phase::evalsha;
            conn.async_exec(detail::make_eval("EVALSHA", s.sha1(), keys, args), std::move(self));
            return;
          case phase::evalsha:
            if (!ec && r.size() == 1 && detail::is_noscript(r[0])) {
              at = phase::eval;
              conn.async_exec(detail::make_eval("EVAL", s.source(), keys, args), std::move(self));
              return;
            }
            [[fallthrough]];
          case phase::eval: {
            auto [e, v] = detail::single_reply(ec, r);
            self.complete(e, std::move(v));
            return;
          }
        }
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
