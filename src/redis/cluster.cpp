// ClusterBackend's compiled part: construction and shutdown, the blocking
// fast path over per-master blocking scopes, and the blocking forms.
#include <future>
#include <stdexcept>

#include "blocking_wait.hpp"
#include "cluster_router.hpp"

namespace dlock {
namespace {

using redis::detail::cluster_router;

// This thread's innermost ClusterBackend::blocking_scope (each links to the
// one before).
thread_local const ClusterBackend::blocking_scope* innermost_cluster_scope = nullptr;

redis::cluster_config checked(redis::cluster_config cfg) {
  if (cfg.seeds.empty())
    throw std::system_error(make_error_code(error::invalid_argument), "ClusterBackend: no seed node");
  if (cfg.node.database != 0)
    throw std::system_error(make_error_code(error::invalid_argument),
                            "ClusterBackend: a Redis Cluster has only database 0");
  if (cfg.max_redirects < 1 || cfg.retry_pause <= std::chrono::milliseconds::zero() ||
      cfg.retry_for < std::chrono::milliseconds::zero())
    throw std::system_error(make_error_code(error::invalid_argument),
                            "ClusterBackend: max_redirects must be at least 1, retry_pause positive and retry_for "
                            "not negative");
  redis::detail::settle_acknowledge(cfg.node, true);
  return cfg;
}

// A blocking form's call: on this thread, over a pooled blocking connection
// to the master of its slot, as one server's blocking forms go; the
// asynchronous way, waited for, when that cannot carry it (no map yet, a
// redirection to follow, a connection that cannot be made).
template <class T, class Fast, class Routed>
std::pair<std::error_code, T> blocking_form(ClusterBackend& backend, Fast&& fast, Routed&& routed) {
  {
    ClusterBackend::blocking_scope scope(backend);
    if (auto out = fast()) return {out->first, std::move(out->second)};
  }
  return redis::detail::wait_for<T>(std::forward<Routed>(routed));
}

}  // namespace

struct ClusterBackend::blocking_scope::node_scope {
  node_scope(std::shared_ptr<void> n, RedisBackend& b) : node(std::move(n)), backend(&b), scope(b) {}
  std::shared_ptr<void> node;  // keeps the cluster's node (and its backend) alive
  RedisBackend* backend;
  RedisBackend::blocking_scope scope;
};

ClusterBackend::blocking_scope::blocking_scope(ClusterBackend& backend)
    : backend_(backend), outer_(innermost_cluster_scope) {
  innermost_cluster_scope = this;
}

ClusterBackend::blocking_scope::~blocking_scope() {
  while (!nodes_.empty()) nodes_.pop_back();  // the newest first: scopes nest
  innermost_cluster_scope = outer_;
}

RedisBackend* ClusterBackend::blocking_scope::enter(const std::shared_ptr<void>& node, RedisBackend& backend) {
  for (auto& n : nodes_)
    if (n->backend == &backend) return n->backend;
  nodes_.push_back(std::make_unique<node_scope>(node, backend));
  return &backend;
}

ClusterBackend::ClusterBackend(std::string_view url) : ClusterBackend(redis::parse_cluster_url(url)) {}

ClusterBackend::ClusterBackend(redis::cluster_config cfg)
    : cfg_(checked(std::move(cfg))), router_(redis::detail::cluster_router::make(core_.get_executor(), cfg_)) {
  core_.start_thread();
  start(true);
}

ClusterBackend::ClusterBackend(executor_type ex, redis::cluster_config cfg)
    : cfg_(checked(std::move(cfg))),
      core_(std::move(ex)),
      router_(redis::detail::cluster_router::make(core_.get_executor(), cfg_)) {
  start(false);
}

ClusterBackend::ClusterBackend(executor_type ex, std::string_view url)
    : ClusterBackend(std::move(ex), redis::parse_cluster_url(url)) {}

ClusterBackend::~ClusterBackend() {
  core_.clear_services();  // they use the connections
  router_->stop();
  core_.drain();
  core_.stop();
}

void ClusterBackend::start(bool wait) {
  if (!wait) return router_->refresh(nullptr);
  std::promise<redis::error_code> read;
  auto done = read.get_future();
  router_->refresh([&read](redis::error_code ec) { read.set_value(ec); });
  if (auto ec = done.get()) {
    router_->stop();
    core_.drain();
    core_.stop();
    throw std::system_error(ec, "cannot read the slot map of " + cfg_.describe());
  }
}

void ClusterBackend::check_not_io_thread() const {
  if (on_io_thread())
    throw std::logic_error("dlock: a blocking ClusterBackend call from its own I/O thread would deadlock");
}

const ClusterBackend::blocking_scope* ClusterBackend::scope_here() const noexcept {
  for (auto* s = innermost_cluster_scope; s; s = s->outer_)
    if (&s->backend_ == this) return s;
  return nullptr;
}

std::optional<std::pair<redis::error_code, redis::response>> ClusterBackend::blocking_exec(
    std::string_view key, const redis::request& req) {
  auto* scope = const_cast<blocking_scope*>(scope_here());
  auto node = scope ? router_->owner(detail::key_slot(key)) : nullptr;
  if (!node) return std::nullopt;
  auto out = scope->enter(node, *node->backend)->blocking_exec(key, req);
  if (!out) return std::nullopt;
  if (out->first) {
    if (redis::detail::is_connection_error(out->first)) router_->refresh_soon();
    return out;
  }
  auto v = redis::detail::judge(out->second, node->at);
  if (v.mixed) return std::pair{redis::error_code(error::outcome_unknown), redis::response{}};
  if (v.how.what == redis::detail::redirect::kind::none) return out;
  if (v.how.what == redis::detail::redirect::kind::moved) router_->learn(v.how.slot, v.how.to);
  return std::nullopt;  // it did not run: the asynchronous path follows the redirection
}

std::optional<std::pair<redis::error_code, redis::value>> ClusterBackend::blocking_eval(
    const redis::script& s, const std::vector<std::string>& keys, const std::vector<std::string>& args) {
  auto* scope = const_cast<blocking_scope*>(scope_here());
  if (!scope || keys.empty() || !redis::detail::keys_in_one_slot(keys)) return std::nullopt;
  auto node = router_->owner(detail::key_slot(keys.front()));
  if (!node) return std::nullopt;
  auto out = scope->enter(node, *node->backend)->blocking_eval(s, keys, args);
  if (!out) return std::nullopt;
  if (out->first && out->first != error::server_error) {
    if (redis::detail::is_connection_error(out->first)) router_->refresh_soon();
    return out;
  }
  auto red = redis::detail::read_redirect(out->second, node->at);
  if (red.what == redis::detail::redirect::kind::none) return out;
  if (red.what == redis::detail::redirect::kind::moved) router_->learn(red.slot, red.to);
  return std::nullopt;
}

std::optional<std::tuple<redis::error_code, redis::response, redis::replica_acks>>
ClusterBackend::blocking_exec_acknowledged(std::string_view key, const redis::request& req) {
  auto* scope = const_cast<blocking_scope*>(scope_here());
  auto node = scope ? router_->owner(detail::key_slot(key)) : nullptr;
  if (!node) return std::nullopt;
  auto out = scope->enter(node, *node->backend)->blocking_exec_acknowledged(key, req);
  if (!out) return std::nullopt;
  auto& [ec, body, acks] = *out;
  if (ec) {
    if (redis::detail::is_connection_error(ec)) router_->refresh_soon();
    // Nothing was sent (ROLE found a replica where the map names a master:
    // a failover the map has not caught up with): the routed path reads
    // the map again and follows it, as it does for a MOVED reply.
    if (ec == condition::not_sent && ec != error::shutting_down) return std::nullopt;
    return out;
  }
  auto v = redis::detail::judge(body, node->at);
  if (v.mixed) return std::tuple{redis::error_code(error::outcome_unknown), redis::response{}, redis::replica_acks{}};
  if (v.how.what == redis::detail::redirect::kind::none) return out;
  if (v.how.what == redis::detail::redirect::kind::moved) router_->learn(v.how.slot, v.how.to);
  return std::nullopt;
}

redis::response ClusterBackend::exec(std::string_view key, redis::request req, std::error_code& ec) {
  check_not_io_thread();
  auto r = blocking_form<redis::response>(
      *this, [&] { return blocking_exec(key, req); },
      [&](auto cb) { async_exec(key, std::move(req), std::move(cb)); });
  ec = r.first;
  return std::move(r.second);
}

redis::response ClusterBackend::exec(std::string_view key, redis::request req) {
  std::error_code ec;
  auto r = exec(key, std::move(req), ec);
  return redis::detail::value_or_throw(std::pair{ec, std::move(r)}, "Redis Cluster request failed");
}

redis::value ClusterBackend::command(std::string_view key, redis::request req, std::error_code& ec) {
  auto r = exec(key, std::move(req), ec);
  auto [e, v] = redis::detail::single_reply(ec, r);
  ec = e;
  return std::move(v);
}

redis::value ClusterBackend::command(std::string_view key, redis::request req) {
  std::error_code ec;
  auto v = command(key, std::move(req), ec);
  if (ec) redis::detail::value_or_throw(std::pair{ec, std::move(v)}, "Redis Cluster command failed");
  return v;
}

redis::value ClusterBackend::eval(const redis::script& s, std::vector<std::string> keys,
                                  std::vector<std::string> args, std::error_code& ec) {
  check_not_io_thread();
  auto r = blocking_form<redis::value>(
      *this, [&] { return blocking_eval(s, keys, args); },
      [&](auto cb) { async_eval(s, std::move(keys), std::move(args), std::move(cb)); });
  ec = r.first;
  return std::move(r.second);
}

redis::value ClusterBackend::eval(const redis::script& s, std::vector<std::string> keys,
                                  std::vector<std::string> args) {
  if (!keys.empty() && !redis::detail::keys_in_one_slot(keys))
    throw std::system_error(make_error_code(error::cross_slot), redis::detail::cross_slot_message(keys));
  std::error_code ec;
  auto v = eval(s, std::move(keys), std::move(args), ec);
  if (ec) redis::detail::value_or_throw(std::pair{ec, std::move(v)}, "Redis Cluster script failed");
  return v;
}

std::optional<redis::address> ClusterBackend::master_of(std::string_view key) const {
  auto node = router_->owner(detail::key_slot(key));
  if (!node) return std::nullopt;
  return node->at;
}

std::optional<redis::connection::stats> ClusterBackend::node_statistics(const redis::address& at) const {
  auto node = router_->known_node(at);
  if (!node) return std::nullopt;
  return node->backend->connection().statistics();
}

std::vector<redis::address> ClusterBackend::masters() const { return router_->masters(); }
std::size_t ClusterBackend::map_reads() const noexcept { return router_->map_reads(); }
std::size_t ClusterBackend::moved_followed() const noexcept { return router_->moved_followed(); }
std::size_t ClusterBackend::ask_followed() const noexcept { return router_->ask_followed(); }
std::size_t ClusterBackend::channel_count() const { return router_->channels().channel_count(); }

}  // namespace dlock
