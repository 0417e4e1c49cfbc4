// The pieces of URL parsing that the schemes share: the error a parser
// throws, percent decoding, and a URL's query (TLS files and names on the
// secure schemes, replica acknowledgement, a unix socket's database).
// Internal to config.cpp.
#pragma once

#include <charconv>
#include <climits>
#include <optional>
#include <string>
#include <string_view>

#include <dlock/redis/config.hpp>

namespace dlock::redis::detail::url {

struct url_error {
  std::string why;
};

inline constexpr auto npos = std::string_view::npos;

// Decodes the user name, the password or a query value. Its messages never
// quote the text.
inline std::string percent_decode(std::string_view text, const char* part) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    unsigned v = 0;
    bool ok = i + 2 < text.size();
    if (ok) {
      auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, v, 16);
      ok = ec == std::errc() && end == text.data() + i + 3;
    }
    if (!ok) throw url_error{std::string("bad percent escape in the ") + part + " (a '%' is written %25)"};
    out.push_back(static_cast<char>(v));
    i += 2;
  }
  return out;
}

inline int parse_db(std::string_view text) {
  int db = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), db);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || db < 0)
    throw url_error{"database \"" + std::string(text) + "\" is not a number from 0 to " + std::to_string(INT_MAX)};
  return db;
}

// What a scheme's query may set, and its name for messages.
struct query_rules {
  const char* scheme;       // "rediss://"
  bool tls = false;         // tls_settings' file and name fields (cfg.tls must be set)
  bool acknowledge = true;  // acknowledge=off|all|if_any|<n>, acknowledge_timeout=<ms>
  bool db = false;          // db=<n> (unix://)
};

// acknowledge=off|all|if_any|<n>
inline int parse_replicas(std::string_view v) {
  if (v == "off") return replica_ack::none;
  if (v == "all") return replica_ack::all;
  if (v == "if_any") return replica_ack::if_any;
  int n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > 1000)
    throw url_error{"acknowledge=\"" + std::string(v) + "\" is not off, all, if_any or a count of replicas from 1 to 1000"};
  return n;
}

// acknowledge_timeout=<ms>: 1 ms to a day.
inline std::chrono::milliseconds parse_ack_timeout(std::string_view v) {
  long long ms = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  if (ec != std::errc() || end != v.data() + v.size() || ms < 1 || ms > 86'400'000)
    throw url_error{"acknowledge_timeout=\"" + std::string(v) + "\" is not a number of milliseconds from 1 to 86400000"};
  return std::chrono::milliseconds(ms);
}

// The names a query may hold under `rules`, for messages.
inline std::string query_names(const query_rules& rules) {
  std::string out;
  auto add = [&out](const char* s) { out += (out.empty() ? "" : ", ") + std::string(s); };
  if (rules.tls)
    for (const char* s : {"ca_file", "ca_dir", "cert_file", "key_file", "server_name"}) add(s);
  if (rules.acknowledge) add("acknowledge, acknowledge_timeout");
  if (rules.db) add("db");
  return out;
}

// `query` (after the '?') into `cfg` under `rules`. A parameter given
// twice: the last one counts.
inline void parse_query(std::string_view query, config& cfg, const query_rules& rules) {
  std::optional<int> replicas;
  std::optional<std::chrono::milliseconds> timeout;
  for (std::size_t start = 0; start <= query.size();) {
    auto amp = query.find('&', start);
    auto item = query.substr(start, amp == npos ? npos : amp - start);
    start = amp == npos ? query.size() + 1 : amp + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    auto name = item.substr(0, eq);
    if (eq == npos) throw url_error{"query parameter \"" + std::string(name) + "\" has no value"};
    auto value = percent_decode(item.substr(eq + 1), "query");
    if (value.empty()) throw url_error{"query parameter \"" + std::string(name) + "\" is empty"};
    std::string* field = nullptr;
    if (rules.tls && cfg.tls) {
      auto& tls = *cfg.tls;
      field = name == "ca_file"       ? &tls.ca_file
              : name == "ca_dir"      ? &tls.ca_dir
              : name == "cert_file"   ? &tls.cert_file
              : name == "key_file"    ? &tls.key_file
              : name == "server_name" ? &tls.server_name
                                      : nullptr;
    }
    if (field) *field = std::move(value);
    else if (rules.acknowledge && name == "acknowledge") replicas = parse_replicas(value);
    else if (rules.acknowledge && name == "acknowledge_timeout") timeout = parse_ack_timeout(value);
    else if (rules.db && name == "db") cfg.database = parse_db(value);
    else {
      const auto names = query_names(rules);
      throw url_error{"unknown query parameter \"" + std::string(name) + "\" (" + rules.scheme +
                      (names.empty() ? std::string(" takes no query") : " takes " + names) + ")"};
    }
  }
  if (cfg.tls && cfg.tls->cert_file.empty() != cfg.tls->key_file.empty())
    throw url_error{"cert_file and key_file go together (a client certificate and its key)"};
  if (timeout && !replicas)
    throw url_error{"acknowledge_timeout needs acknowledge=all, if_any or <n> in the same URL"};
  if (timeout && *replicas == replica_ack::none)
    throw url_error{"acknowledge_timeout with acknowledge=off: there is nothing to wait for"};
  if (replicas) {
    replica_ack ack;  // set in the URL: not owner_checked_only (see replica_ack)
    ack.replicas = *replicas;
    if (timeout) ack.timeout = *timeout;
    cfg.acknowledge = ack;
  }
}

// The end of a URL past its hosts: its query goes to `cfg` under `rules`,
// and `rest` loses it. A fragment is refused.
inline void take_query(std::string_view& rest, config& cfg, const query_rules& rules) {
  if (auto hash = rest.find('#'); hash != npos)
    throw url_error{"unexpected \"" + std::string(rest.substr(hash)) + "\" (" + rules.scheme + " takes no fragment)"};
  if (auto q = rest.find('?'); q != npos) {
    parse_query(rest.substr(q + 1), cfg, rules);
    rest = rest.substr(0, q);
  }
}

}  // namespace dlock::redis::detail::url
