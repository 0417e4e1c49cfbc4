// The Sentinel deployment: start order (master, replicas through proxies,
// then sentinels), readiness, and the failover helpers.
#include "sentinel_deployment.hpp"

#include <stdexcept>
#include <thread>

namespace dlock::test {

sentinel_deployment::sentinel_deployment(sentinel_options opts) : opts_(std::move(opts)) {
  server_options master;
  if (opts_.tls) {
    master.tls = opts_.tls;
    master.extra_args = {"--tls-replication", "yes"};
  }
  nodes_.push_back(std::make_unique<redis_server>(master));
  for (int i = 0; i < opts_.replicas; ++i) {
    server_options o = master;
    o.replica_of = nodes_[0]->port();
    o.environment = opts_.replica_environment;
    if (opts_.proxied) {
      proxies_.push_back(std::make_unique<fault_proxy>(nodes_[0]->port()));
      o.replica_of = proxies_.back()->port();
    }
    nodes_.push_back(std::make_unique<redis_server>(o));
  }
  for (std::size_t i = 1; i < nodes_.size(); ++i) nodes_[i]->wait_until_synced();
  nodes_[0]->wait_until_listed(opts_.replicas);
  if (opts_.client_proxied) client_proxy_ = std::make_unique<fault_proxy>(nodes_[0]->port());
  const auto monitored = client_proxy_ ? client_proxy_->port() : nodes_[0]->port();
  sentinels_ = std::make_unique<sentinel_group>(opts_.master_name, monitored, opts_.sentinels, opts_.quorum,
                                                opts_.down_after_ms, opts_.failover_timeout_ms, opts_.tls);
  sentinels_->wait_ready(opts_.replicas);
}

sentinel_deployment::~sentinel_deployment() {
  sentinels_.reset();  // first: no failover while the rest goes
  nodes_.clear();
  proxies_.clear();
  client_proxy_.reset();
}

std::string sentinel_deployment::url() const {
  std::string out = opts_.tls ? "rediss-sentinel://" : "redis-sentinel://";
  auto ports = sentinels_->ports();
  for (std::size_t i = 0; i < ports.size(); ++i) out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(ports[i]);
  if (opts_.tls) out += "?ca_file=" + opts_.tls->ca();
  return out + "#" + opts_.master_name;
}

redis_server& sentinel_deployment::master() {
  auto port = sentinels_->current_master_port();
  if (client_proxy_ && port == client_proxy_->port()) return *nodes_[0];
  for (auto& n : nodes_)
    if (n->port() == port) return *n;
  throw std::runtime_error("the sentinels name a master that is not in the deployment");
}

fault_proxy& sentinel_deployment::client_proxy() {
  if (!client_proxy_) throw std::logic_error("sentinel_deployment: clients reach the master directly");
  return *client_proxy_;
}

void sentinel_deployment::hold_replication() {
  if (!opts_.proxied) throw std::logic_error("sentinel_deployment: replication is not proxied");
  for (auto& p : proxies_) p->stall(fault_proxy::direction::to_client);
}

void sentinel_deployment::hold_replication_to(std::size_t node) {
  if (!opts_.proxied) throw std::logic_error("sentinel_deployment: replication is not proxied");
  proxies_.at(node - 1)->stall(fault_proxy::direction::to_client);
}

void sentinel_deployment::release_replication() {
  if (!opts_.proxied) throw std::logic_error("sentinel_deployment: replication is not proxied");
  for (auto& p : proxies_) p->resume();
}

void sentinel_deployment::lose_held_replication() {
  if (!opts_.proxied) throw std::logic_error("sentinel_deployment: replication is not proxied");
  for (auto& p : proxies_) {
    p->cut();
    p->resume();
  }
}

std::uint16_t sentinel_deployment::wait_for_new_master(std::uint16_t old_port, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    try {
      auto port = sentinels_->current_master_port();
      if (port != old_port) {
        for (auto& n : nodes_)
          if (n->port() == port && n->running() && n->command({"ROLE"}).rfind("master", 0) == 0) return port;
      }
    } catch (const std::exception&) {
      // a sentinel or node between states: ask again
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("no failover within the limit (master still on port " + std::to_string(old_port) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace dlock::test
