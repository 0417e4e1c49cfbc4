// ClusterBackend's router: the slot map and how it is read, the node table
// (a RedisBackend per master), and the small readers of a node's replies
// that the routing and the blocking forms share; the shard channels that
// follow their slots are cluster_channels'. Internal to libdlock.
#pragma once

#include <dlock/backend/cluster.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ask_once.hpp"
#include "cluster_channels.hpp"

namespace dlock::redis::detail {

using cluster_clock = std::chrono::steady_clock;
inline constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
inline constexpr std::uint16_t no_node = 0xFFFF;

// Slot maps are read again after a MOVED at most this often (the MOVED
// itself updates its slot at once).
inline constexpr std::chrono::milliseconds min_refresh_gap{100};

// `req` with ASKING ahead of each command (an ASK redirection: ASKING lets
// only the command right after it through).
inline request with_asking(const request& req) {
  parser p(parser_limits{std::size_t(-1) >> 1, std::size_t(-1) >> 1, 16, std::size_t(-1) >> 1});
  request out;
  std::string_view rest = req.payload();
  std::vector<std::string_view> args;
  while (!rest.empty()) {
    auto r = p.parse(rest);
    rest.remove_prefix(r.consumed);
    if (r.ec || (!r.reply && r.consumed == 0)) break;  // our own encoding: cannot happen
    if (!r.reply) continue;
    args.clear();
    for (auto& e : r.reply->elements) args.push_back(e.str);
    out.push("ASKING");
    out.push_args(args);
  }
  return out;
}

// The replies to a request sent with_asking, without ASKING's: nullopt
// when an ASKING was refused.
inline std::optional<response> without_asking(response r) {
  response out;
  for (std::size_t i = 0; i + 1 < r.size(); i += 2) {
    if (r[i].is_error()) return std::nullopt;
    out.push_back(std::move(r[i + 1]));
  }
  return out;
}

// What a response says as a whole: every reply redirects the same way (the
// command did not run there), none does, or some do (part of it ran).
struct verdict {
  redirect how;
  bool mixed = false;
};

inline verdict judge(const response& r, const address& from) {
  verdict v;
  bool any_plain = false;
  for (auto& reply : r) {
    auto red = read_redirect(reply, from);
    if (red.what == redirect::kind::none) {
      any_plain = true;
    } else if (v.how.what == redirect::kind::none) {
      v.how = red;
    }
  }
  if (v.how.what != redirect::kind::none && any_plain) v.mixed = true;
  return v;
}

// (These, and is_connection_error in cluster_channels.hpp, are also used by
// ClusterBackend's blocking forms.)

inline bool keys_in_one_slot(const std::vector<std::string>& keys) {
  for (auto& k : keys)
    if (key_slot(k) != key_slot(keys.front())) return false;
  return true;
}

// A node whose command connection was up and is down now (it died, or the
// network dropped): commands queued there wait for it up to their timeout.
inline bool lost_link(const cluster_node& n) {
  auto s = n.backend->connection().statistics();
  return s.connects > 0 && !s.up;
}

// The slot map and the nodes, and the channels subscribed on them. Every
// member may be called from any thread (one mutex); callbacks run on the
// executor. The router never calls its channels under its mutex (they ask
// it for the map under theirs).
class cluster_router final : public slot_map_view, public std::enable_shared_from_this<cluster_router> {
  struct private_tag {};

 public:
  static std::shared_ptr<cluster_router> make(asio::any_io_executor ex, cluster_config cfg) {
    auto r = std::make_shared<cluster_router>(private_tag{}, std::move(ex), std::move(cfg));
    r->channels_ = std::make_shared<cluster_channels>(r->ex_, r, r->cfg_.max_redirects, r->cfg_.node.reconnect_wait_max);
    return r;
  }
  cluster_router(private_tag, asio::any_io_executor ex, cluster_config cfg)
      : ex_(std::move(ex)), cfg_(std::move(cfg)), owner_(cluster_slots, no_node), tls_(shared_tls_client(cfg_.node.tls)) {
    node_cfg_ = cfg_.node;
    node_cfg_.source.reset();
    node_cfg_.require_master = true;
    node_cfg_.sharded_pubsub = cfg_.sharded_pubsub;
  }

  const asio::any_io_executor& executor() const noexcept { return ex_; }
  const cluster_config& settings() const noexcept { return cfg_; }

  // ---- the map -----------------------------------------------------------

  cluster_channels& channels() noexcept { return *channels_; }

  std::shared_ptr<cluster_node> owner(std::uint16_t slot) const override {
    std::lock_guard g(m_);
    auto i = owner_[slot];
    return i == no_node ? nullptr : nodes_[i];
  }

  std::vector<address> masters() const {
    std::lock_guard g(m_);
    std::vector<address> out;
    std::vector<bool> seen(nodes_.size());
    for (auto i : owner_)
      if (i != no_node && !seen[i]) {
        seen[i] = true;
        out.push_back(nodes_[i]->at);
      }
    return out;
  }

  // The node at `a`, made (connecting in the background) when new. Nodes
  // stay until the router goes: an operation may hold one at any time.
  std::shared_ptr<cluster_node> node_at(const address& a) {
    std::lock_guard g(m_);
    return nodes_[index_of(a)];
  }

  // The node at `a` if it is known, else null (nothing is made).
  std::shared_ptr<cluster_node> known_node(const address& a) const {
    std::lock_guard g(m_);
    for (auto& n : nodes_)
      if (n->at == a) return n;
    return nullptr;
  }

  // Tells `n`'s connections to connect at once if they are waiting out a
  // reconnect backoff (a node refused as a replica that a fresh map still
  // names: it may have been promoted back). At most once per
  // min_refresh_gap per node, like the background map reads: a node that
  // stays a replica is not sent a handshake per retry of every command.
  void wake(cluster_node& n) {
    {
      std::lock_guard g(m_);
      const auto now = cluster_clock::now();
      if (now - n.woken < min_refresh_gap) return;
      n.woken = now;
    }
    n.backend->server_moved(n.at);
  }

  // A MOVED reply: the slot is at `to` now.
  void learn(std::uint16_t slot, const address& to) {
    ++moved_;
    {
      std::lock_guard g(m_);
      owner_[slot] = index_of(to);
    }
    channels_->map_changed();
    refresh_soon();
  }

  void note_ask() { ++asked_; }

  // Reads the map again (one read at a time; callers meanwhile share it),
  // then calls `done` with its outcome.
  void refresh(std::function<void(error_code)> done) override {
    {
      std::lock_guard g(m_);
      if (stopped_) {
        asio::post(ex_, [done = std::move(done)] { done(error::shutting_down); });
        return;
      }
      if (done) refresh_waiters_.push_back(std::move(done));
      if (refreshing_) return;
      refreshing_ = true;
    }
    asio::co_spawn(ex_, read_map(shared_from_this()), [self = shared_from_this()](std::exception_ptr e, error_code ec) {
      if (e) ec = error::cluster_down;
      self->map_read(ec);
    });
  }

  // A read of the map in the background, unless one ran a moment ago.
  void refresh_soon() override {
    {
      std::lock_guard g(m_);
      if (refreshing_ || cluster_clock::now() - last_read_ < min_refresh_gap) return;
    }
    refresh(nullptr);
  }

  // `done` once there is a map (at once when there is one).
  void with_map(std::function<void(error_code)> done) {
    bool known = false;
    {
      std::lock_guard g(m_);
      known = have_map_;
    }
    if (known) return done({});
    refresh(std::move(done));
  }

  std::size_t map_reads() const noexcept { return reads_.load(); }
  std::size_t moved_followed() const noexcept { return moved_.load(); }
  std::size_t ask_followed() const noexcept { return asked_.load(); }

  // Stops every node's connections: what is queued or sent later completes
  // with shutting_down.
  void stop() {
    std::vector<std::shared_ptr<cluster_node>> nodes;
    {
      std::lock_guard g(m_);
      stopped_ = true;
      nodes = nodes_;
    }
    channels_->stop();
    for (auto& n : nodes) n->backend->stop();
  }

  bool stopped() const {
    std::lock_guard g(m_);
    return stopped_;
  }

 private:
  // Under m_.
  std::uint16_t index_of(const address& a) {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i]->at == a) return static_cast<std::uint16_t>(i);
    auto cfg = node_cfg_;
    cfg.kind = a.kind;
    cfg.host = a.host;
    cfg.port = a.port;
    cfg.path = a.path;
    auto n = std::make_shared<cluster_node>();
    n->at = a;
    n->backend = std::make_unique<RedisBackend>(ex_, cfg);
    if (stopped_) n->backend->stop();
    std::weak_ptr<cluster_channels> weak = channels_;
    std::weak_ptr<cluster_node> weak_node = n;
    n->backend->subscriber().set_channel_lost_handler([weak, weak_node](const std::string& channel) {
      auto channels = weak.lock();
      auto node = weak_node.lock();
      if (channels && node) channels->channel_lost(node, channel);
    });
    nodes_.push_back(std::move(n));
    return static_cast<std::uint16_t>(nodes_.size() - 1);
  }

  // The nodes to ask for the map: the masters of the map, then the seeds,
  // then every other node met.
  std::vector<address> candidates() const {
    std::vector<address> out = masters();
    std::lock_guard g(m_);
    auto add = [&](const address& a) {
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    };
    for (auto& s : cfg_.seeds) add(s);
    for (auto& n : nodes_) add(n->at);
    return out;
  }

  static asio::awaitable<error_code> read_map(std::shared_ptr<cluster_router> self) {
    error_code last = error::cluster_down;
    for (const auto& a : self->candidates()) {
      if (self->stopped()) co_return error_code(error::shutting_down);
      for (const char* how : {"SHARDS", "SLOTS"}) {
        request req;
        push_auth(req, self->cfg_.node.user, self->cfg_.node.password);
        req.push("CLUSTER", how);
        auto [ec, r] = co_await ask_once(a, req, self->cfg_.node.connect_timeout, self->cfg_.node.limits, self->tls_);
        if (ec) {
          last = ec;
          break;
        }
        if (r.size() != req.size()) {
          last = error::unexpected_reply;
          break;
        }
        if (r.size() == 2 && refuses_auth(r[0])) co_return error_code(error::auth_failed);
        const auto& reply = r.back();
        if (reply.is_error()) {
          last = error::cluster_down;  // not a cluster node, or no CLUSTER SHARDS: try SLOTS
          continue;
        }
        auto shards = std::string_view(how) == "SHARDS" ? read_cluster_shards(reply, a, self->tls_ != nullptr) : read_cluster_slots(reply, a);
        if (!shards || shards->empty()) {
          last = error::cluster_down;
          break;
        }
        self->apply(*shards);
        co_return error_code{};
      }
    }
    co_return last;
  }

  void apply(const std::vector<cluster_shard>& shards) {
    {
      std::lock_guard g(m_);
      std::vector<std::uint16_t> fresh(cluster_slots, no_node);
      for (auto& s : shards) {
        auto i = index_of(s.master);
        for (auto [first, last] : s.ranges)
          for (std::size_t slot = first; slot <= last; ++slot) fresh[slot] = i;
      }
      owner_.swap(fresh);
      have_map_ = true;
    }
    ++reads_;
    channels_->map_changed();
  }

  void map_read(error_code ec) {
    std::vector<std::function<void(error_code)>> waiters;
    {
      std::lock_guard g(m_);
      refreshing_ = false;
      last_read_ = cluster_clock::now();
      waiters.swap(refresh_waiters_);
    }
    for (auto& w : waiters) w(ec);
  }

  asio::any_io_executor ex_;
  cluster_config cfg_;
  config node_cfg_;
  mutable std::mutex m_;
  std::vector<std::uint16_t> owner_;  // slot -> index in nodes_
  std::shared_ptr<const tls_client> tls_;  // for the slot map's questions; null: plain text
  std::vector<std::shared_ptr<cluster_node>> nodes_;
  bool have_map_ = false;
  bool refreshing_ = false;
  bool stopped_ = false;
  cluster_clock::time_point last_read_{};
  std::vector<std::function<void(error_code)>> refresh_waiters_;
  std::shared_ptr<cluster_channels> channels_;
  std::atomic<std::size_t> reads_{0}, moved_{0}, asked_{0};
};

}  // namespace dlock::redis::detail
