// Reading what a cluster node says about the cluster: its slot map (CLUSTER
// SHARDS, or CLUSTER SLOTS before Redis 7.0) and its redirections.
#include <dlock/redis/cluster.hpp>

#include <charconv>

namespace dlock::redis::detail {
namespace {

std::optional<std::int64_t> number(const value& v) {
  if (v.type == kind::integer) return v.integer;
  if (!v.is_string()) return std::nullopt;
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(v.str.data(), v.str.data() + v.str.size(), n);
  if (ec != std::errc() || end != v.str.data() + v.str.size()) return std::nullopt;
  return n;
}

std::optional<std::uint16_t> port_of(const value& v) {
  auto n = number(v);
  if (!n || *n <= 0 || *n > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(*n);
}

std::optional<std::uint16_t> slot_of(const value& v) {
  auto n = number(v);
  if (!n || *n < 0 || *n >= static_cast<std::int64_t>(cluster_slots)) return std::nullopt;
  return static_cast<std::uint16_t>(*n);
}

// A node's host as it reports it: an empty one (or "?", an unknown
// endpoint) is the host of the node that replied.
std::string host_or(const std::string& host, const address& replied_by) {
  return host.empty() || host == "?" ? replied_by.host : host;
}

// The value of `field` in a RESP2 map given as a flat array of pairs.
const value* field(const value& map, std::string_view name) {
  if (!map.is_array()) return nullptr;
  for (std::size_t i = 0; i + 1 < map.elements.size(); i += 2)
    if (map.elements[i].is_string() && map.elements[i].str == name) return &map.elements[i + 1];
  return nullptr;
}

std::string text_field(const value& map, std::string_view name) {
  auto* f = field(map, name);
  return f && f->is_string() ? f->str : std::string();
}

}  // namespace

std::optional<std::vector<cluster_shard>> read_cluster_shards(const value& v, const address& replied_by, bool tls) {
  if (!v.is_array()) return std::nullopt;
  std::vector<cluster_shard> out;
  for (const auto& shard : v.elements) {
    const value* slots = field(shard, "slots");
    const value* nodes = field(shard, "nodes");
    if (!slots || !nodes || !slots->is_array() || !nodes->is_array() || slots->elements.size() % 2 != 0)
      return std::nullopt;
    cluster_shard s;
    for (std::size_t i = 0; i < slots->elements.size(); i += 2) {
      auto first = slot_of(slots->elements[i]);
      auto last = slot_of(slots->elements[i + 1]);
      if (!first || !last || *first > *last) return std::nullopt;
      s.ranges.emplace_back(*first, *last);
    }
    // The online master; a master of another health only when there is
    // none (the map then says where the slots are, and commands find out).
    const value* chosen = nullptr;
    for (const auto& node : nodes->elements) {
      if (text_field(node, "role") != "master") continue;
      if (!chosen || text_field(node, "health") == "online") chosen = &node;
      if (text_field(node, "health") == "online") break;
    }
    if (s.ranges.empty()) continue;  // a shard without slots (a spare master)
    if (!chosen) return std::nullopt;
    // A node lists the ports it has: "port" (plain text) and "tls-port";
    // a client takes the one it speaks, else the other.
    auto* port = field(*chosen, tls ? "tls-port" : "port");
    if (!port) port = field(*chosen, tls ? "port" : "tls-port");
    auto p = port ? port_of(*port) : std::nullopt;
    if (!p) return std::nullopt;
    auto endpoint = text_field(*chosen, "endpoint");
    if (endpoint.empty() || endpoint == "?") endpoint = text_field(*chosen, "ip");
    s.master = address{config::transport::tcp, host_or(endpoint, replied_by), *p, {}};
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<std::vector<cluster_shard>> read_cluster_slots(const value& v, const address& replied_by) {
  if (!v.is_array()) return std::nullopt;
  std::vector<cluster_shard> out;
  for (const auto& range : v.elements) {
    // [first, last, [host, port, id, ...] (the master), replicas...]
    if (!range.is_array() || range.elements.size() < 3) return std::nullopt;
    auto first = slot_of(range.elements[0]);
    auto last = slot_of(range.elements[1]);
    const auto& master = range.elements[2];
    if (!first || !last || *first > *last || !master.is_array() || master.elements.size() < 2 ||
        !master.elements[0].is_string())
      return std::nullopt;
    auto p = port_of(master.elements[1]);
    if (!p) return std::nullopt;
    address at{config::transport::tcp, host_or(master.elements[0].str, replied_by), *p, {}};
    cluster_shard* s = nullptr;
    for (auto& known : out)
      if (known.master == at) s = &known;
    if (!s) s = &out.emplace_back(cluster_shard{at, {}});
    s->ranges.emplace_back(*first, *last);
  }
  return out;
}

redirect read_redirect(const value& v, const address& replied_by) {
  redirect r;
  if (!v.is_error()) return r;
  std::string_view text = v.str;
  auto starts = [&](std::string_view word) {
    return text.substr(0, word.size()) == word && (text.size() == word.size() || text[word.size()] == ' ');
  };
  if (starts("TRYAGAIN")) {
    r.what = redirect::kind::try_again;
    return r;
  }
  if (starts("CLUSTERDOWN")) {
    r.what = redirect::kind::cluster_down;
    return r;
  }
  const bool moved = starts("MOVED");
  if (!moved && !starts("ASK")) return r;
  // "MOVED <slot> <host>:<port>" (the host may be empty: the node's own,
  // or an IPv6 address, so the port follows the last ':').
  auto rest = text.substr(moved ? 6 : 4);
  auto space = rest.find(' ');
  if (space == std::string_view::npos) return r;
  auto slot = rest.substr(0, space);
  auto hostport = rest.substr(space + 1);
  auto colon = hostport.rfind(':');
  if (colon == std::string_view::npos) return r;
  unsigned s = 0, p = 0;
  auto [send, sec] = std::from_chars(slot.data(), slot.data() + slot.size(), s);
  auto port = hostport.substr(colon + 1);
  auto [pend, pec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (sec != std::errc() || send != slot.data() + slot.size() || s >= cluster_slots || pec != std::errc() ||
      pend != port.data() + port.size() || p == 0 || p > 65535)
    return r;
  auto host = std::string(hostport.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  r.what = moved ? redirect::kind::moved : redirect::kind::ask;
  r.slot = static_cast<std::uint16_t>(s);
  r.to = address{config::transport::tcp, host_or(host, replied_by), static_cast<std::uint16_t>(p), {}};
  return r;
}

}  // namespace dlock::redis::detail
