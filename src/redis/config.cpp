// Redis URL parsing (redis://, rediss://, unix://, and the Sentinel and
// Cluster forms) and the settings' descriptions.
#include <dlock/redis/config.hpp>

#include <sys/un.h>

#include <array>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstring>

#include <dlock/error.hpp>
#include <dlock/redis/cluster.hpp>
#include <dlock/redis/redlock.hpp>
#include <dlock/redis/sentinel.hpp>

#include "url_query.hpp"

namespace dlock::redis {

namespace {

using detail::url::npos;
using detail::url::parse_db;
using detail::url::parse_query;
using detail::url::percent_decode;
using detail::url::query_rules;
using detail::url::take_query;
using detail::url::url_error;

// The longest unix socket path: sockaddr_un holds it and its NUL.
constexpr std::size_t max_unix_path = sizeof(sockaddr_un{}.sun_path) - 1;

// Where the user info of `rest` (a URL after its "scheme://") ends: the
// index of its '@', or npos when it has none. In a redis:// URL it ends at
// the last '@' (host, port and database hold none), so a password with an
// unencoded '/', '?', '#' or '@' is still taken whole, never as a path. A
// unix:// path may hold '@', so there the user info is only what comes
// before the first "@/", when the URL does not start with the path.
std::size_t userinfo_end(std::string_view scheme, std::string_view rest) {
  if (scheme == "unix") {
    if (rest.empty() || rest.front() == '/') return npos;
    return rest.find("@/");
  }
  return rest.rfind('@');
}

// The URL for messages, with its user info (user name and password)
// replaced by "***"; also whatever might be user info that the parser did
// not take as such, so that no error ever shows a password.
std::string masked(std::string_view url) {
  auto sep = url.find("://");
  auto scheme = sep == npos ? std::string_view() : url.substr(0, sep);
  auto start = sep == npos ? 0 : sep + 3;
  auto rest = url.substr(start);
  auto at = userinfo_end(scheme, rest);
  if (at == npos) {
    if (scheme == "unix" && !rest.empty() && rest.front() == '/') return std::string(url);
    at = rest.rfind('@');
    if (at == npos) return std::string(url);
  }
  return std::string(url.substr(0, start)) + "***" + std::string(rest.substr(at));
}

// `cred` is the user info without its '@': user[:password].
void take_credentials(std::string_view cred, config& cfg) {
  auto colon = cred.find(':');
  cfg.user = percent_decode(cred.substr(0, colon), "user name");
  if (colon != npos) cfg.password = percent_decode(cred.substr(colon + 1), "password");
}

bool valid_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// Past the user info, every message may quote what it rejects. A query may
// follow: replica acknowledgement, and with `tls` (rediss://) TLS settings.
void parse_tcp(std::string_view rest, config& cfg, bool tls = false) {
  cfg.kind = config::transport::tcp;
  if (auto at = userinfo_end("redis", rest); at != npos) {
    take_credentials(rest.substr(0, at), cfg);
    rest = rest.substr(at + 1);
  }
  if (tls) cfg.tls.emplace();
  take_query(rest, cfg, query_rules{.scheme = tls ? "a rediss:// URL" : "a redis:// URL", .tls = tls});
  auto slash = rest.find('/');
  auto hostport = rest.substr(0, slash);
  auto path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);

  std::string_view host, port;
  if (!hostport.empty() && hostport[0] == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) throw url_error{"IPv6 host \"" + std::string(hostport) + "\" lacks its ']'"};
    host = hostport.substr(1, close - 1);
    auto after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') throw url_error{"unexpected \"" + std::string(after) + "\" after the IPv6 host"};
      port = after.substr(1);
      if (port.empty()) throw url_error{"empty port after ':'"};
    }
    for (char c : host)
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'))
        throw url_error{"IPv6 host \"" + std::string(host) + "\" has a bad character"};
  } else {
    auto colon = hostport.find(':');
    host = hostport.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = hostport.substr(colon + 1);
      if (port.find(':') != std::string_view::npos)
        throw url_error{"host \"" + std::string(hostport) + "\" has more than one ':' (put IPv6 addresses in brackets)"};
      if (port.empty()) throw url_error{"empty port after ':'"};
    }
    for (char c : host)
      if (!valid_host_char(c)) throw url_error{"host \"" + std::string(host) + "\" has a bad character"};
  }
  if (host.empty()) throw url_error{"the host is empty"};
  cfg.host = std::string(host);

  if (!port.empty()) {
    unsigned p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p == 0 || p > 65535)
      throw url_error{"port \"" + std::string(port) + "\" is not a number from 1 to 65535"};
    cfg.port = static_cast<std::uint16_t>(p);
  }
  if (!path.empty()) {
    if (path.find('/') != std::string_view::npos)
      throw url_error{"path \"/" + std::string(path) + "\" is not a database number"};
    cfg.database = parse_db(path);
  }
}

void parse_unix(std::string_view rest, config& cfg) {
  cfg.kind = config::transport::unix_socket;
  if (auto at = userinfo_end("unix", rest); at != npos) {
    take_credentials(rest.substr(0, at), cfg);
    rest = rest.substr(at + 1);
  }
  if (rest.empty() || rest.front() != '/') {
    if (rest.find('@') != npos)  // perhaps user info: not quoted
      throw url_error{"the socket path must be absolute (unix://[user[:password]@]/path)"};
    throw url_error{"the socket path must be absolute (unix:///path), not \"" + std::string(rest) + "\""};
  }
  auto path = rest;
  auto q = path.find('?');
  if (q != std::string_view::npos) {
    parse_query(path.substr(q + 1), cfg, query_rules{.scheme = "a unix:// URL", .db = true});
    path = path.substr(0, q);
  }
  if (path.size() < 2) throw url_error{"the socket path is empty"};
  if (path.size() > max_unix_path)
    throw url_error{"the socket path \"" + std::string(path) + "\" is " + std::to_string(path.size()) +
                    " bytes long; at most " + std::to_string(max_unix_path) + " fit in a unix socket address"};
  cfg.path = std::string(path);
}

// The throwing form of a parser that reports through (ec, why).
template <class Result>
Result or_throw(std::string_view url, Result (*parse)(std::string_view, std::error_code&, std::string*)) {
  std::error_code ec;
  std::string why;
  Result out = parse(url, ec, &why);
  if (ec) throw std::system_error(ec, why);
  return out;
}

// "host[:port],host[:port],...": `what` names an entry in messages
// ("sentinel", "node").
std::vector<address> parse_hosts(std::string_view list, std::uint16_t default_port, const char* what) {
  std::vector<address> out;
  for (std::size_t start = 0;;) {
    auto comma = list.find(',', start);
    auto one = list.substr(start, comma == npos ? npos : comma - start);
    if (one.empty())
      throw url_error{std::string("an empty ") + what + " address in the list \"" + std::string(list) + "\""};
    config node;
    node.port = default_port;
    parse_tcp(one, node);
    out.push_back(address::of(node));
    if (comma == npos) return out;
    start = comma + 1;
  }
}

// Runs `parse(out)` and reports a url_error through (ec, why), naming the
// kind of URL (`what`): the one shape of the three parsers below.
template <class Result, class Parse>
Result reporting(std::string_view url, std::error_code& ec, std::string* why, const char* what, Parse parse) {
  ec.clear();
  Result out;
  try {
    parse(out);
  } catch (const url_error& e) {
    ec = make_error_code(error::invalid_url);
    if (why) *why = std::string("invalid ") + what + " \"" + masked(url) + "\": " + e.why;
    return {};
  }
  return out;
}

// The scheme of a URL of several hosts, `plain` or `secure` (TLS): whether it
// is the secure one, and what follows it. `hint` ends the message for
// another scheme.
std::pair<bool, std::string_view> take_scheme(std::string_view url, std::string_view plain, std::string_view secure,
                                              std::string_view hint) {
  const bool tls = url.substr(0, secure.size()) == secure;
  if (!tls && url.substr(0, plain.size()) != plain) {
    if (url.find("://") == npos)
      throw url_error{"no scheme (expected " + std::string(plain) + " or " + std::string(secure) + ")"};
    throw url_error{"unknown scheme \"" + std::string(url.substr(0, url.find("://"))) + "\" (" + std::string(hint) +
                    ")"};
  }
  return {tls, url.substr(tls ? secure.size() : plain.size())};
}

// The user info of a URL of several hosts, shared by all of them: it runs to
// the last '@' (see userinfo_end). Taken off the front of `rest`.
void take_shared_credentials(std::string_view& rest, config& into) {
  auto at = rest.rfind('@');
  if (at == npos) return;
  take_credentials(rest.substr(0, at), into);
  rest = rest.substr(at + 1);
}

// "/<db>" at the end of a URL of several hosts: the database number, if
// one is given. Taken off the end of `rest`.
std::optional<int> take_database(std::string_view& rest) {
  auto slash = rest.find('/');
  if (slash == npos) return std::nullopt;
  auto path = rest.substr(slash + 1);
  if (path.find('/') != npos) throw url_error{"path \"/" + std::string(path) + "\" is not a database number"};
  rest = rest.substr(0, slash);
  if (path.empty()) return std::nullopt;
  return parse_db(path);
}

}  // namespace

config parse_url(std::string_view url, std::error_code& ec, std::string* why) {
  return reporting<config>(url, ec, why, "Redis URL", [&](config& cfg) {
    auto sep = url.find("://");
    if (sep == std::string_view::npos) throw url_error{"no scheme (expected redis://, rediss:// or unix://)"};
    auto scheme = url.substr(0, sep);
    auto rest = url.substr(sep + 3);
    if (scheme == "redis") parse_tcp(rest, cfg);
    else if (scheme == "rediss") parse_tcp(rest, cfg, true);
    else if (scheme == "unix") parse_unix(rest, cfg);
    else throw url_error{"unknown scheme \"" + std::string(scheme) + "\" (expected redis://, rediss:// or unix://)"};
  });
}

sentinel_config parse_sentinel_url(std::string_view url, std::error_code& ec, std::string* why) {
  return reporting<sentinel_config>(url, ec, why, "Sentinel URL", [&](sentinel_config& out) {
    auto [tls, rest] = take_scheme(url, "redis-sentinel://", "rediss-sentinel://",
                                   "expected redis-sentinel:// or rediss-sentinel://");
    take_shared_credentials(rest, out.master);
    // The master's name follows the first '#' after the user info.
    auto hash = rest.find('#');
    if (hash == npos) throw url_error{"no master name (add #<name>, the name the sentinels monitor)"};
    if (rest.find('?', hash) != npos)
      throw url_error{"a '?' in the master name (the query goes before '#': ...?acknowledge=off#name; a '?' in "
                      "the name is written %3F)"};
    out.master_name = percent_decode(rest.substr(hash + 1), "master name");
    if (out.master_name.empty()) throw url_error{"the master name after '#' is empty"};
    rest = rest.substr(0, hash);
    if (tls) out.master.tls.emplace();
    if (auto q = rest.find('?'); q != npos) {
      parse_query(rest.substr(q + 1), out.master,
                  query_rules{.scheme = tls ? "a rediss-sentinel:// URL" : "a redis-sentinel:// URL", .tls = tls});
      rest = rest.substr(0, q);
    }
    if (tls) out.sentinel_tls = out.master.tls;
    if (auto db = take_database(rest)) out.master.database = *db;
    if (rest.empty()) throw url_error{"no sentinel host"};
    out.sentinels = parse_hosts(rest, default_sentinel_port, "sentinel");
  });
}

sentinel_config parse_sentinel_url(std::string_view url) {
  return or_throw<sentinel_config>(url, parse_sentinel_url);
}

cluster_config parse_cluster_url(std::string_view url, std::error_code& ec, std::string* why) {
  return reporting<cluster_config>(url, ec, why, "Redis Cluster URL", [&](cluster_config& out) {
    auto [tls, rest] = take_scheme(url, "redis://", "rediss://",
                                   "a cluster's URL is redis://host:port,host:port,... or rediss://...");
    take_shared_credentials(rest, out.node);
    if (tls) out.node.tls.emplace();
    take_query(rest, out.node, query_rules{.scheme = tls ? "a rediss:// URL" : "a redis:// URL", .tls = tls});
    if (auto db = take_database(rest); db && *db != 0)
      throw url_error{"database " + std::to_string(*db) + ": a Redis Cluster has only database 0"};
    if (rest.empty()) throw url_error{"no seed node"};
    out.seeds = parse_hosts(rest, default_tcp_port, "node");
  });
}

cluster_config parse_cluster_url(std::string_view url) {
  return or_throw<cluster_config>(url, parse_cluster_url);
}

redlock_config parse_redlock_url(std::string_view url, std::error_code& ec, std::string* why) {
  return reporting<redlock_config>(url, ec, why, "Redlock URL", [&](redlock_config& out) {
    config shared;
    auto [tls, rest] = take_scheme(url, "redis://", "rediss://",
                                   "a Redlock URL is redis://host:port,host:port,host:port or rediss://...");
    take_shared_credentials(rest, shared);
    // Redlock's nodes are independent masters: no replica acknowledgement.
    if (tls) shared.tls.emplace();
    take_query(rest, shared, query_rules{.scheme = "a Redlock URL", .tls = tls, .acknowledge = false});
    if (auto db = take_database(rest)) shared.database = *db;
    if (rest.empty()) throw url_error{"no node"};
    for (const auto& at : parse_hosts(rest, default_tcp_port, "node")) {
      config node = shared;
      node.kind = at.kind;
      node.host = at.host;
      node.port = at.port;
      node.path = at.path;
      out.nodes.push_back(std::move(node));
    }
  });
}

redlock_config parse_redlock_url(std::string_view url) {
  return or_throw<redlock_config>(url, parse_redlock_url);
}

config parse_url(std::string_view url) {
  return or_throw<config>(url, parse_url);
}

}  // namespace dlock::redis
