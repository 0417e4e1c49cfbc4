// ClusterBackend's compiled part: the slot map and how it is read, the
// routing of each call with its redirections, the sharded subscriptions
// that follow their slots, and the blocking forms.
#include <dlock/backend/cluster.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ask_once.hpp"
#include "blocking_wait.hpp"

namespace dlock::redis::detail {
namespace {

using clock = std::chrono::steady_clock;
using dlock::detail::key_slot;
using std::chrono::milliseconds;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::uint16_t no_node = 0xFFFF;

// Slot maps are read again after a MOVED at most this often (the MOVED
// itself updates its slot at once).
constexpr milliseconds min_refresh_gap{100};

// `req` with ASKING ahead of each command (an ASK redirection: ASKING lets
// only the command right after it through).
request with_asking(const request& req) {
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
std::optional<response> without_asking(response r) {
  response out;
  for (std::size_t i = 0; i + 1 < r.size(); i += 2) {
    if (r[i].is_error()) return std::nullopt;
    out.push_back(std::move(r[i + 1]));
  }
  return out;
}

}  // namespace

// What a response says as a whole: every reply redirects the same way (the
// command did not run there), none does, or some do (part of it ran).
struct verdict {
  redirect how;
  bool mixed = false;
};

verdict judge(const response& r, const address& from) {
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

bool is_connection_error(const error_code& ec) {
  return ec == condition::not_sent || ec == error::outcome_unknown || ec == error::not_master;
}

// (The three above are also used by ClusterBackend's blocking forms.)

bool keys_in_one_slot(const std::vector<std::string>& keys) {
  for (auto& k : keys)
    if (key_slot(k) != key_slot(keys.front())) return false;
  return true;
}

struct cluster_node {
  address at;
  std::unique_ptr<RedisBackend> backend;
};

// The slot map, the nodes, and the sharded subscriptions. Every member may
// be called from any thread (one mutex); callbacks run on the executor.
class cluster_router final : public subscription_owner, public std::enable_shared_from_this<cluster_router> {
 public:
  cluster_router(asio::any_io_executor ex, cluster_config cfg)
      : ex_(std::move(ex)), cfg_(std::move(cfg)), owner_(cluster_slots, no_node) {
    node_cfg_ = cfg_.node;
    node_cfg_.source.reset();
    node_cfg_.require_master = true;
    node_cfg_.sharded_pubsub = true;
  }

  const asio::any_io_executor& executor() const noexcept { return ex_; }
  const cluster_config& settings() const noexcept { return cfg_; }

  // ---- the map -----------------------------------------------------------

  std::shared_ptr<cluster_node> owner(std::uint16_t slot) const {
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

  // A MOVED reply: the slot is at `to` now.
  void learn(std::uint16_t slot, const address& to) {
    ++moved_;
    std::vector<std::string> moving;
    {
      std::lock_guard g(m_);
      owner_[slot] = index_of(to);
      moving = channels_off_map();
    }
    for (auto& ch : moving) resubscribe(ch);
    refresh_soon();
  }

  void note_ask() { ++asked_; }

  // Reads the map again (one read at a time; callers meanwhile share it),
  // then calls `done` with its outcome.
  void refresh(std::function<void(error_code)> done) {
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
  void refresh_soon() {
    {
      std::lock_guard g(m_);
      if (refreshing_ || clock::now() - last_read_ < min_refresh_gap) return;
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
    std::vector<subscription> subs;
    {
      std::lock_guard g(m_);
      stopped_ = true;
      nodes = nodes_;
      for (auto& [name, e] : channels_) subs.push_back(std::move(e.node_sub));
      channels_.clear();
      channel_count_ = 0;
    }
    subs.clear();
    for (auto& n : nodes) n->backend->stop();
  }

  bool stopped() const {
    std::lock_guard g(m_);
    return stopped_;
  }

  // ---- sharded subscriptions ---------------------------------------------

  void subscribe(std::string channel, listener l, subscribe_done done) {
    bool start = false;
    {
      std::lock_guard g(m_);
      if (stopped_) {
        asio::post(ex_, [done = std::move(done)] { done(error::shutting_down, subscription()); });
        return;
      }
      auto [it, created] = channels_.try_emplace(channel);
      auto& e = it->second;
      if (created) {
        e.slot = key_slot(channel);
        channel_count_ = channels_.size();
      }
      auto id = ++next_id_;
      if (e.confirmed) {
        e.listeners.emplace(id, std::move(l));
        auto sub = make_subscription(weak_from_this(), channel, id);
        asio::post(ex_, [done = std::move(done), sub = std::move(sub)]() mutable { done({}, std::move(sub)); });
        return;
      }
      e.pending.emplace(id, pending_listener{std::move(l), std::move(done)});
      start = !e.subscribing;
      if (start) e.subscribing = true;
    }
    if (start) subscribe_at_owner(channel, 0);
  }

  void remove_listener(std::string channel, std::uint64_t id) noexcept override {
    subscription dropped;
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end()) return;
      auto& e = it->second;
      e.listeners.erase(id);
      e.pending.erase(id);
      if (!e.listeners.empty() || !e.pending.empty()) return;
      dropped = std::move(e.node_sub);
      channels_.erase(it);
      channel_count_ = channels_.size();
    }
  }

  std::size_t channel_count() const {
    std::lock_guard g(m_);
    return channel_count_;
  }

 private:
  struct pending_listener {
    listener l;
    subscribe_done done;
  };
  struct channel_entry {
    std::uint16_t slot = 0;
    std::map<std::uint64_t, listener> listeners;         // confirmed
    std::map<std::uint64_t, pending_listener> pending;   // waiting for a subscription
    std::shared_ptr<cluster_node> at;                    // where it is subscribed (or being)
    subscription node_sub;                               // that node's subscription
    std::uint64_t generation = 0;                        // of the newest subscribe attempt
    bool confirmed = false;
    bool subscribing = false;
    bool told_deaf = false;
  };

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
    std::weak_ptr<cluster_router> weak = weak_from_this();
    std::weak_ptr<cluster_node> weak_node = n;
    n->backend->subscriber().set_channel_lost_handler([weak, weak_node](const std::string& channel) {
      auto self = weak.lock();
      auto node = weak_node.lock();
      if (self && node) self->channel_lost(node, channel);
    });
    nodes_.push_back(std::move(n));
    return static_cast<std::uint16_t>(nodes_.size() - 1);
  }

  // Under m_: confirmed channels whose slot the map gives to another node.
  std::vector<std::string> channels_off_map() {
    std::vector<std::string> out;
    for (auto& [name, e] : channels_) {
      if (!e.confirmed || !e.at) continue;
      auto i = owner_[e.slot];
      if (i != no_node && nodes_[i] != e.at) out.push_back(name);
    }
    return out;
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
        auto [ec, r] = co_await ask_once(a, req, self->cfg_.node.connect_timeout, self->cfg_.node.limits);
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
        auto shards = std::string_view(how) == "SHARDS" ? read_cluster_shards(reply, a) : read_cluster_slots(reply, a);
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
    std::vector<std::string> moving;
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
      moving = channels_off_map();
    }
    ++reads_;
    for (auto& ch : moving) resubscribe(ch);
  }

  void map_read(error_code ec) {
    std::vector<std::function<void(error_code)>> waiters;
    {
      std::lock_guard g(m_);
      refreshing_ = false;
      last_read_ = clock::now();
      waiters.swap(refresh_waiters_);
    }
    for (auto& w : waiters) w(ec);
  }

  // Subscribes `channel` at the master of its slot (reading the map first
  // when there is none for it).
  void subscribe_at_owner(const std::string& channel, int attempt) {
    std::uint16_t slot = key_slot(channel);
    auto node = owner(slot);
    if (!node) {
      refresh([self = shared_from_this(), channel, attempt, slot](error_code ec) {
        if (!ec && self->owner(slot)) return self->subscribe_at_owner(channel, attempt);
        self->subscribe_failed(channel, ec ? ec : error_code(error::cluster_down), attempt);
      });
      return;
    }
    std::uint64_t generation = 0;
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end()) return;
      it->second.at = node;
      generation = ++it->second.generation;
    }
    std::weak_ptr<cluster_router> weak = weak_from_this();
    listener forward = [weak, channel](std::optional<std::string_view> m) {
      if (auto self = weak.lock()) self->deliver(channel, m);
    };
    node->backend->async_subscribe(
        channel, std::move(forward),
        asio::bind_executor(ex_, [self = shared_from_this(), channel, node, generation, attempt](error_code ec,
                                                                                               subscription sub) {
          self->subscribed(channel, node, generation, attempt, ec, std::move(sub));
        }));
  }

  void subscribed(const std::string& channel, const std::shared_ptr<cluster_node>& node, std::uint64_t generation,
                  int attempt, error_code ec, subscription sub) {
    if (ec) {
      {
        std::lock_guard g(m_);
        auto it = channels_.find(channel);
        if (it == channels_.end() || it->second.generation != generation) return;
      }
      if ((ec == error::slot_moved || is_connection_error(ec)) && ec != error::shutting_down &&
          attempt < cfg_.max_redirects) {
        // The map is stale, or the master is gone: read it, then try where
        // it says.
        refresh([self = shared_from_this(), channel, attempt](error_code) {
          self->subscribe_at_owner(channel, attempt + 1);
        });
        return;
      }
      subscribe_failed(channel, ec, attempt);
      return;
    }
    std::vector<std::pair<subscribe_done, subscription>> confirmed;
    std::vector<listener> told;
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || it->second.generation != generation || stopped_) return;  // sub unsubscribes
      auto& e = it->second;
      e.node_sub = std::move(sub);
      e.at = node;
      e.confirmed = true;
      e.subscribing = false;
      e.told_deaf = false;
      // Listeners from before a move may have missed a message meanwhile.
      for (auto& [id, l] : e.listeners) told.push_back(l);
      for (auto& [id, p] : e.pending) {
        e.listeners.emplace(id, std::move(p.l));
        confirmed.emplace_back(std::move(p.done), make_subscription(weak_from_this(), channel, id));
      }
      e.pending.clear();
    }
    for (auto& [done, s] : confirmed) done({}, std::move(s));
    for (auto& l : told) call_listener(channel, l, std::nullopt);
  }

  // A subscribe that failed: the new listeners hear the error; listeners
  // from before (a move) hear once that they may miss messages, and it is
  // tried again after a pause.
  void subscribe_failed(const std::string& channel, error_code ec, int attempt) {
    std::vector<subscribe_done> failed;
    std::vector<listener> told;
    bool retry = false;
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end()) return;
      auto& e = it->second;
      for (auto& [id, p] : e.pending) failed.push_back(std::move(p.done));
      e.pending.clear();
      if (e.listeners.empty()) {
        channels_.erase(it);
        channel_count_ = channels_.size();
      } else {
        retry = !stopped_;
        if (!e.told_deaf)
          for (auto& [id, l] : e.listeners) told.push_back(l);
        e.told_deaf = true;
      }
    }
    for (auto& d : failed) d(ec, subscription());
    for (auto& l : told) call_listener(channel, l, std::nullopt);
    if (!retry) return;
    auto timer = std::make_shared<asio::steady_timer>(ex_, cfg_.node.reconnect_wait_max);
    timer->async_wait([self = shared_from_this(), timer, channel, attempt](error_code) {
      self->refresh([self, channel, attempt](error_code) { self->subscribe_at_owner(channel, attempt + 1); });
    });
  }

  // The node no longer serves `channel` (its slot moved): subscribe where
  // the map says now, once it was read again.
  void channel_lost(const std::shared_ptr<cluster_node>& node, const std::string& channel) {
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || it->second.at != node) return;
    }
    refresh([self = shared_from_this(), channel](error_code) { self->resubscribe(channel); });
  }

  // Moves a confirmed channel to the master of its slot now.
  void resubscribe(const std::string& channel) {
    subscription old;
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || it->second.subscribing || stopped_) return;
      auto& e = it->second;
      old = std::move(e.node_sub);
      e.confirmed = false;
      e.subscribing = true;
    }
    old.reset();
    subscribe_at_owner(channel, 0);
  }

  void deliver(const std::string& channel, std::optional<std::string_view> message) {
    std::vector<listener> targets;
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || !it->second.confirmed) return;
      for (auto& [id, l] : it->second.listeners) targets.push_back(l);
    }
    // A node's subscriber reconnected or cannot: its master may have
    // failed over, so the map is read again.
    if (!message) refresh_soon();
    for (auto& l : targets) call_listener(channel, l, message);
  }

  asio::any_io_executor ex_;
  cluster_config cfg_;
  config node_cfg_;
  mutable std::mutex m_;
  std::vector<std::uint16_t> owner_;  // slot -> index in nodes_
  std::vector<std::shared_ptr<cluster_node>> nodes_;
  bool have_map_ = false;
  bool refreshing_ = false;
  bool stopped_ = false;
  clock::time_point last_read_{};
  std::vector<std::function<void(error_code)>> refresh_waiters_;
  std::map<std::string, channel_entry> channels_;
  std::size_t channel_count_ = 0;
  std::uint64_t next_id_ = 0;
  std::atomic<std::size_t> reads_{0}, moved_{0}, asked_{0};
};

namespace {

asio::awaitable<void> pause(const asio::any_io_executor& ex, milliseconds d) {
  asio::steady_timer t(ex, d);
  co_await t.async_wait(use_tuple);
}

// Waits until the router has a map (`fresh`: until it has read it again):
// `void(error_code)`.
template <class Token>
auto async_map_ready(const std::shared_ptr<cluster_router>& r, bool fresh, Token&& token) {
  return asio::async_initiate<Token, void(error_code)>(
      [r, fresh](auto handler) {
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        auto ex = asio::get_associated_executor(*h, r->executor());
        auto done = [h, ex](error_code ec) { asio::post(ex, [h, ec] { std::move(*h)(ec); }); };
        if (fresh) r->refresh(std::move(done));
        else r->with_map(std::move(done));
      },
      token);
}

// A node whose command connection was up and is down now (it died, or the
// network dropped): commands queued there wait for it up to their timeout.
bool lost_link(const cluster_node& n) {
  auto s = n.backend->connection().statistics();
  return s.connects > 0 && !s.up;
}

// One routed request: to the master of its slot, following redirections.
asio::awaitable<std::tuple<error_code, response, replica_acks>> routed(std::shared_ptr<cluster_router> r,
                                                                      std::uint16_t slot, request req,
                                                                      bool acknowledged) {
  const auto& cfg = r->settings();
  const auto give_up_at = clock::now() + std::min(cfg.retry_for, cfg.node.command_timeout);
  auto ex = r->executor();
  int redirects = 0;
  std::shared_ptr<cluster_node> target;
  bool asking = false;
  bool map_checked = false;
  for (;;) {
    if (r->stopped()) co_return std::tuple{error_code(error::shutting_down), response{}, replica_acks{}};
    if (!target) {
      target = r->owner(slot);
      if (!target) {
        auto [ec] = co_await async_map_ready(r, false, use_tuple);
        if (ec) co_return std::tuple{ec, response{}, replica_acks{}};
        target = r->owner(slot);
        if (!target) {
          // Known map, slot not covered: read it again until the pause runs out.
          if (clock::now() >= give_up_at)
            co_return std::tuple{error_code(error::cluster_down), response{}, replica_acks{}};
          r->refresh_soon();
          co_await pause(ex, cfg.retry_pause);
          continue;
        }
      }
    }
    // Its master's connection is down: it may have failed over. Read the
    // map first (once per command), rather than wait in a dead node's queue.
    if (!asking && !map_checked && lost_link(*target)) {
      map_checked = true;
      co_await async_map_ready(r, true, use_tuple);
      if (auto now = r->owner(slot)) target = now;
    }
    request to_send = asking ? with_asking(req) : req;
    error_code ec;
    response resp;
    replica_acks acks;
    if (acknowledged) {
      std::tie(ec, resp, acks) =
          co_await target->backend->async_exec_acknowledged(std::string_view(), std::move(to_send), use_tuple);
    } else {
      std::tie(ec, resp) = co_await target->backend->async_exec(std::move(to_send), use_tuple);
    }
    if (ec) {
      if (is_connection_error(ec)) r->refresh_soon();
      // Never written: where the map says next, once it was read again.
      if (ec == condition::not_sent && ec != error::shutting_down && clock::now() < give_up_at) {
        co_await pause(ex, cfg.retry_pause);
        target = nullptr;
        asking = false;
        continue;
      }
      co_return std::tuple{ec, response{}, replica_acks{}};
    }
    if (asking) {
      auto stripped = without_asking(std::move(resp));
      if (!stripped) co_return std::tuple{error_code(error::unexpected_reply), response{}, replica_acks{}};
      resp = std::move(*stripped);
    }
    auto v = judge(resp, target->at);
    if (v.mixed) co_return std::tuple{error_code(error::outcome_unknown), response{}, replica_acks{}};
    switch (v.how.what) {
      case redirect::kind::none: co_return std::tuple{error_code{}, std::move(resp), acks};
      case redirect::kind::moved:
        if (++redirects > cfg.max_redirects) break;
        r->learn(v.how.slot, v.how.to);
        target = r->node_at(v.how.to);
        asking = false;
        continue;
      case redirect::kind::ask:
        if (++redirects > cfg.max_redirects) break;
        r->note_ask();
        target = r->node_at(v.how.to);
        asking = true;
        continue;
      case redirect::kind::try_again:
      case redirect::kind::cluster_down:
        if (clock::now() >= give_up_at) break;
        if (v.how.what == redirect::kind::cluster_down) {
          r->refresh_soon();
          target = nullptr;
        }
        asking = asking && v.how.what == redirect::kind::try_again;
        co_await pause(ex, cfg.retry_pause);
        continue;
    }
    co_return std::tuple{error_code(error::cluster_down), response{}, replica_acks{}};
  }
}

// A script sent as EVAL with its text (a redirected call: the target may
// not have it loaded).
request eval_request(const script& s, const std::vector<std::string>& keys, const std::vector<std::string>& args) {
  request req;
  push_eval(req, "EVAL", s.source(), keys, args);
  return req;
}

// A reply that means the call did not run where it was sent, or an error
// that says it was never written: route it again.
bool route_again(const call_result& c, const address& from) {
  if (c.ec) return c.ec == condition::not_sent && c.ec != error::shutting_down;
  return read_redirect(c.reply, from).what != redirect::kind::none;
}

}  // namespace

namespace {

// The routed way: a coroutine that follows redirections.
void spawn_routed(const std::shared_ptr<cluster_router>& r, std::uint16_t slot, request req, bool acknowledged,
                  exec_done done) {
  asio::co_spawn(r->executor(), routed(r, slot, std::move(req), acknowledged),
                 [done = std::move(done)](std::exception_ptr e, std::tuple<error_code, response, replica_acks> out) {
                   if (e) return done(error::unexpected_exception, {}, {});
                   auto& [ec, resp, acks] = out;
                   done(ec, std::move(resp), acks);
                 });
}

}  // namespace

void cluster_exec(const std::shared_ptr<cluster_router>& r, std::uint16_t slot, request req, bool acknowledged,
                  exec_done done) {
  auto node = r->owner(slot);
  if (!node || lost_link(*node)) return spawn_routed(r, slot, std::move(req), acknowledged, std::move(done));
  // The usual way: queued on the master's connection before this returns
  // (so calls keep the order they were made in), with a copy kept in case
  // the reply redirects it.
  auto sent = req;
  auto on_reply = [r, node, slot, req = std::move(req), acknowledged, done = std::move(done)](
                      error_code ec, response resp, replica_acks acks) mutable {
    if (ec) {
      if (is_connection_error(ec)) r->refresh_soon();
      if (ec != condition::not_sent || ec == error::shutting_down) return done(ec, {}, {});
      return spawn_routed(r, slot, std::move(req), acknowledged, std::move(done));  // never written
    }
    auto v = judge(resp, node->at);
    if (v.mixed) return done(error::outcome_unknown, {}, {});
    if (v.how.what == redirect::kind::none) return done({}, std::move(resp), acks);
    if (v.how.what == redirect::kind::moved) r->learn(v.how.slot, v.how.to);
    spawn_routed(r, slot, std::move(req), acknowledged, std::move(done));  // it did not run there
  };
  if (acknowledged) {
    node->backend->async_exec_acknowledged(std::string_view(), std::move(sent),
                                           asio::bind_executor(r->executor(), std::move(on_reply)));
  } else {
    node->backend->async_exec(std::move(sent), asio::bind_executor(r->executor(), [on_reply = std::move(on_reply)](
                                                                                 error_code ec, response resp) mutable {
                                on_reply(ec, std::move(resp), replica_acks{});
                              }));
  }
}

void cluster_eval(const std::shared_ptr<cluster_router>& r, const script& s, std::vector<std::string> keys,
                  std::vector<std::string> args, eval_done done) {
  if (!keys.empty() && !keys_in_one_slot(keys)) {
    asio::post(r->executor(), [done = std::move(done)] { done(error::cross_slot, value{}); });
    return;
  }
  const std::uint16_t slot = keys.empty() ? 0 : key_slot(keys.front());
  auto node = r->owner(slot);
  // The usual way first: by SHA, on the master's command connection.
  if (node && !lost_link(*node)) {
    node->backend->async_eval(
        s, keys, args,
        asio::bind_executor(r->executor(), [r, node, slot, &s, keys, args, done = std::move(done)](
                                               error_code ec, value v) mutable {
          call_result c{ec == error::server_error ? error_code{} : ec, v};
          if (!route_again(c, node->at)) return done(ec, std::move(v));
          if (!c.ec) {
            auto red = read_redirect(v, node->at);
            if (red.what == redirect::kind::moved) r->learn(red.slot, red.to);
          }
          cluster_exec(r, slot, eval_request(s, keys, args), false,
                       [done = std::move(done)](error_code ec, response resp, replica_acks) {
                         auto [e, out] = single_reply(ec, resp);
                         done(e, std::move(out));
                       });
        }));
    return;
  }
  cluster_exec(r, slot, eval_request(s, keys, args), false,
               [done = std::move(done)](error_code ec, response resp, replica_acks) {
                 auto [e, out] = single_reply(ec, resp);
                 done(e, std::move(out));
               });
}

void cluster_eval_all(const std::shared_ptr<cluster_router>& r, std::vector<script_call> calls, bool acknowledged,
                      batch_done done) {
  struct batch {
    std::mutex m;
    std::vector<script_call> calls;
    std::vector<call_result> out;
    std::size_t pending = 1;  // released once every part is started
    replica_acks acks;        // the least of the masters whose replies count
    bool any_acks = false;
    batch_done done;
  };
  auto b = std::make_shared<batch>();
  b->calls = std::move(calls);
  b->out.resize(b->calls.size());
  b->done = std::move(done);
  auto finish_one = [b] {
    bool last = false;
    {
      std::lock_guard g(b->m);
      last = --b->pending == 0;
    }
    if (last) b->done(std::move(b->out), b->acks);
  };
  // A call routed on its own (no master known, or redirected).
  auto alone = [r, b, acknowledged, finish_one](std::size_t i) {
    const auto& c = b->calls[i];
    if (!c.keys.empty() && !keys_in_one_slot(c.keys)) {
      b->out[i].ec = error::cross_slot;
      return;
    }
    {
      std::lock_guard g(b->m);
      ++b->pending;
    }
    std::uint16_t slot = c.keys.empty() ? 0 : key_slot(c.keys.front());
    cluster_exec(r, slot, eval_request(*c.script, c.keys, c.args), acknowledged,
                 [b, i, acknowledged, finish_one](error_code ec, response resp, replica_acks acks) {
                   auto [e, v] = single_reply(ec, resp);
                   {
                     std::lock_guard g(b->m);
                     if (e == error::server_error) e = {};
                     if (!e && acknowledged && !acks.met()) e = error::not_acknowledged;
                     b->out[i] = call_result{e, std::move(v)};
                     if (!e && acknowledged && (!b->any_acks || acks.wanted < b->acks.wanted)) {
                       b->acks = acks;
                       b->any_acks = true;
                     }
                   }
                   finish_one();
                 });
  };
  r->with_map([r, b, acknowledged, alone, finish_one](error_code) {
    // One part per master, every part at once.
    std::map<cluster_node*, std::pair<std::shared_ptr<cluster_node>, std::vector<std::size_t>>> parts;
    for (std::size_t i = 0; i < b->calls.size(); ++i) {
      const auto& c = b->calls[i];
      auto node = c.keys.empty() || !keys_in_one_slot(c.keys) ? nullptr : r->owner(key_slot(c.keys.front()));
      if (!node || lost_link(*node)) {
        alone(i);
        continue;
      }
      auto& part = parts[node.get()];
      part.first = node;
      part.second.push_back(i);
    }
    for (auto& [raw, part] : parts) {
      auto node = part.first;
      auto at = part.second;
      std::vector<script_call> mine;
      for (auto i : at) mine.push_back(b->calls[i]);
      {
        std::lock_guard g(b->m);
        ++b->pending;
      }
      auto on_results = [b, node, at, acknowledged, alone, finish_one](std::vector<call_result> res,
                                                                       replica_acks acks) {
        std::vector<std::size_t> again;
        {
          std::lock_guard g(b->m);
          const bool acked = !acknowledged || acks.met();
          bool counted = false;
          for (std::size_t j = 0; j < at.size() && j < res.size(); ++j) {
            if (route_again(res[j], node->at)) {
              again.push_back(at[j]);
              continue;
            }
            if (!res[j].ec && !acked) res[j].ec = error::not_acknowledged;
            counted = counted || !res[j].ec;
            b->out[at[j]] = std::move(res[j]);
          }
          if (acknowledged && acked && counted && (!b->any_acks || acks.wanted < b->acks.wanted)) {
            b->acks = acks;
            b->any_acks = true;
          }
        }
        for (auto i : again) alone(i);
        finish_one();
      };
      if (acknowledged) {
        node->backend->async_eval_all_acknowledged(std::move(mine), asio::bind_executor(r->executor(), on_results));
      } else {
        node->backend->async_eval_all(
            std::move(mine), asio::bind_executor(r->executor(), [on_results](std::vector<call_result> res) {
              on_results(std::move(res), replica_acks{});
            }));
      }
    }
    finish_one();
  });
}

void cluster_subscribe(const std::shared_ptr<cluster_router>& r, std::string channel, listener l,
                       subscribe_done done) {
  r->subscribe(std::move(channel), std::move(l), std::move(done));
}

std::string cross_slot_message(const std::vector<std::string>& keys) {
  std::string out = "the keys lie in different cluster slots:";
  for (auto& k : keys) out += " \"" + k + "\" (slot " + std::to_string(key_slot(k)) + ")";
  return out;
}

}  // namespace dlock::redis::detail

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
  redis::detail::check_acknowledge(cfg.node);
  return cfg;
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
    : cfg_(checked(std::move(cfg))), router_(std::make_shared<cluster_router>(core_.get_executor(), cfg_)) {
  core_.start_thread();
  start(true);
}

ClusterBackend::ClusterBackend(executor_type ex, redis::cluster_config cfg)
    : cfg_(checked(std::move(cfg))),
      core_(std::move(ex)),
      router_(std::make_shared<cluster_router>(core_.get_executor(), cfg_)) {
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
  auto r = redis::detail::wait_for<redis::response>([&](auto cb) { async_exec(key, std::move(req), std::move(cb)); });
  ec = r.first;
  return std::move(r.second);
}

redis::response ClusterBackend::exec(std::string_view key, redis::request req) {
  check_not_io_thread();
  return redis::detail::value_or_throw(
      redis::detail::wait_for<redis::response>([&](auto cb) { async_exec(key, std::move(req), std::move(cb)); }),
      "Redis Cluster request failed");
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
  auto r = redis::detail::wait_for<redis::value>(
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

std::vector<redis::address> ClusterBackend::masters() const { return router_->masters(); }
std::size_t ClusterBackend::map_reads() const noexcept { return router_->map_reads(); }
std::size_t ClusterBackend::moved_followed() const noexcept { return router_->moved_followed(); }
std::size_t ClusterBackend::ask_followed() const noexcept { return router_->ask_followed(); }
std::size_t ClusterBackend::channel_count() const { return router_->channel_count(); }

}  // namespace dlock
