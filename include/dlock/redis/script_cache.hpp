// Lua scripts, script calls, and the one place that decides how a call is
// encoded: EVALSHA, preceded in the same pipeline by SCRIPT LOAD when the
// connection has not loaded the script yet.
#pragma once

#include <charconv>
#include <cstddef>
#include <span>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/request.hpp>

namespace dlock::redis {

/// A Lua script and its SHA-1. Keys and values reach it only as KEYS and
/// ARGV: its text is fixed when it is built and never spliced with data.
class script {
 public:
  /// Keeps `source` and computes its SHA-1 once.
  explicit script(std::string source) : source_(std::move(source)), sha1_(sha1_hex(source_)) {}

  const std::string& source() const noexcept { return source_; }  ///< the Lua text
  /// Its SHA-1, 40 lowercase hex digits: its name in EVALSHA.
  const std::string& sha1() const noexcept { return sha1_; }

 private:
  std::string source_;
  std::string sha1_;
};

/// One run of a script: the script (which must outlive the call), its KEYS
/// and its ARGV.
struct script_call {
  const redis::script* script;   ///< not owned: must outlive the call
  std::vector<std::string> keys;  ///< KEYS
  std::vector<std::string> args;  ///< ARGV
};

/// What one call of a batch came to (see a backend's async_eval_all): its
/// own error (its server could not be reached, or its reply was lost:
/// outcome_unknown), or its reply (an error reply is a value of
/// kind::error: calls fail one by one).
struct call_result {
  error_code ec;  ///< the call's own error, if any
  value reply;    ///< its reply, if any (kind::error when the script failed)
};

namespace detail {

// The reply of one command as (error, value): an error reply becomes
// server_error with the reply (and so the server's text) as the value.
inline std::pair<error_code, value> single_reply(error_code ec, response& r) {
  if (ec) return {ec, value{}};
  if (r.size() != 1) return {make_error_code(error::unexpected_reply), value{}};
  if (r[0].is_error()) return {make_error_code(error::server_error), std::move(r[0])};
  return {{}, std::move(r[0])};
}



/// A batch's outcome as one result per call: `ec` (the whole round trip
/// failed) for every call, or each reply; a missing reply is
/// unexpected_reply.
inline std::vector<call_result> call_results(error_code ec, std::vector<value> replies, std::size_t n) {
  std::vector<call_result> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (ec) out[i].ec = ec;
    else if (i < replies.size()) out[i].reply = std::move(replies[i]);
    else out[i].ec = make_error_code(error::unexpected_reply);
  }
  return out;
}

inline bool is_noscript(const value& v) { return v.is_error() && v.str.compare(0, 8, "NOSCRIPT") == 0; }

/// Appends `verb body numkeys keys... args...` (verb: EVAL or EVALSHA).
inline void push_eval(request& req, std::string_view verb, std::string_view body, const std::vector<std::string>& keys,
                      const std::vector<std::string>& args) {
  char count_buf[24];
  auto [count_end, count_ec] = std::to_chars(count_buf, count_buf + sizeof count_buf, keys.size());
  const std::string_view count(count_buf, static_cast<std::size_t>(count_end - count_buf));
  auto fill = [&](std::string_view* parts) {
    std::size_t n = 0;
    parts[n++] = verb;
    parts[n++] = body;
    parts[n++] = count;
    for (auto& k : keys) parts[n++] = k;
    for (auto& a : args) parts[n++] = a;
    req.push_args(std::span<const std::string_view>(parts, n));
  };
  // A lock's scripts take a handful of keys and arguments: no allocation.
  const std::size_t n = 3 + keys.size() + args.size();
  if (n <= 16) {
    std::string_view parts[16];
    fill(parts);
  } else {
    std::vector<std::string_view> parts(n);
    fill(parts.data());
  }
}

/// Which scripts one connection has loaded, as far as it knows: so that the
/// first run of a script costs no extra round trip (SCRIPT LOAD rides in the
/// same pipeline, ahead of the EVALSHA) and later runs send only the SHA.
/// The connection clears it on every reconnect (the server may have
/// restarted); a NOSCRIPT reply (SCRIPT FLUSH, a failover) makes the caller
/// forget the script, and its next run loads it again. Thread-safe.
class script_cache {
 public:
  /// Where a pushed call's replies are: its EVALSHA's, and whether a
  /// SCRIPT LOAD went just ahead of it (its reply is then at `reply - 1`).
  struct slot {
    std::size_t reply;
    bool loads;
  };

  /// Appends `call` to `req`, with a SCRIPT LOAD ahead of it when the
  /// script is not known to be loaded.
  slot push(request& req, const script_call& call) { return push(req, *call.script, call.keys, call.args); }

  /// As above, for a call given by its parts (nothing copied).
  slot push(request& req, const script& s, const std::vector<std::string>& keys,
            const std::vector<std::string>& args) {
    bool load = false;
    {
      std::lock_guard g(m_);
      load = loaded_.insert(s.sha1()).second;
    }
    if (load) req.push("SCRIPT", "LOAD", s.source());
    slot at{req.size(), load};
    push_eval(req, "EVALSHA", s.sha1(), keys, args);
    return at;
  }

  /// The server answered NOSCRIPT for `s`: load it with its next run.
  void forget(const script& s) {
    std::lock_guard g(m_);
    loaded_.erase(s.sha1());
  }

  /// A new connection: nothing is known to be loaded.
  void clear() {
    std::lock_guard g(m_);
    loaded_.clear();
  }

 private:
  std::mutex m_;
  std::set<std::string> loaded_;  // SHA-1s
};

}  // namespace detail
}  // namespace dlock::redis
