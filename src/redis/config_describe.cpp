// How settings describe themselves in messages: a URL without the
// password (and without TLS file names), for every kind of deployment.
#include <dlock/redis/cluster.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/redlock.hpp>
#include <dlock/redis/sentinel.hpp>

#include <string>
#include <vector>

namespace dlock::redis {

namespace {

// "host:port,host:port,...": a list of hosts as a URL gives them.
std::string host_list(const std::vector<address>& hosts) {
  std::string out;
  for (std::size_t i = 0; i < hosts.size(); ++i) out += (i ? "," : "") + hosts[i].describe();
  return out;
}

// "user:***@", "user@", ":***@" or nothing: the user info a description shows.
std::string masked_credentials(const config& cfg) {
  if (cfg.user.empty() && cfg.password.empty()) return {};
  return cfg.user + (cfg.password.empty() ? "" : ":***") + "@";
}

}  // namespace

std::string config::describe() const {
  const std::string creds = masked_credentials(*this);
  if (kind == transport::unix_socket) {
    std::string out = "unix://" + creds + path;
    if (database != 0) out += "?db=" + std::to_string(database);
    return out;
  }
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::string out = (tls ? "rediss://" : "redis://") + creds + h + ":" + std::to_string(port);
  if (database != 0) out += "/" + std::to_string(database);
  return out;
}

std::string address::describe() const {
  if (kind == config::transport::unix_socket) return "unix:" + path;
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

std::string sentinel_config::describe() const {
  std::string out = (master.tls ? "rediss-sentinel://" : "redis-sentinel://") + masked_credentials(master) +
                    host_list(sentinels);
  if (master.database != 0) out += "/" + std::to_string(master.database);
  return out + "#" + master_name;
}

std::string cluster_config::describe() const {
  return (node.tls ? "rediss://" : "redis://") + masked_credentials(node) + host_list(seeds);
}

std::string redlock_config::describe() const {
  std::string out;
  for (const auto& n : nodes) {
    if (out.empty()) out = (n.tls ? "rediss://" : "redis://") + masked_credentials(n);
    else out += ",";
    out += address::of(n).describe();
  }
  if (!nodes.empty() && nodes.front().database != 0) out += "/" + std::to_string(nodes.front().database);
  return out;
}

}  // namespace dlock::redis
