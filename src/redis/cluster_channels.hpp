// ClusterBackend's shard channels (or classic ones, as its settings say):
// one subscription per channel, at the master of the channel's slot,
// shared by all of its listeners, and moved when that slot moves: on the
// old master's own `sunsubscribe` (the end of a migration), on a MOVED
// learned by any command, and on a fresh read of the map (a failover).
// Listeners of a moved channel hear std::nullopt once it is subscribed
// again (a release may have gone by meanwhile). Internal to libdlock.
#pragma once

#include <dlock/backend/cluster.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dlock::redis::detail {

using dlock::detail::key_slot;

// An error that says the node did not answer (down, unreachable, or a
// replica now): the map may be stale.
inline bool is_connection_error(const error_code& ec) {
  return ec == condition::not_sent || ec == error::outcome_unknown || ec == error::not_master;
}

struct cluster_node {
  address at;
  std::unique_ptr<RedisBackend> backend;
  // When its connections were last told to connect at once (see
  // cluster_router::wake); guarded by the router's mutex.
  std::chrono::steady_clock::time_point woken{};
};

// What the channels ask of the slot map (the router): thread-safe.
class slot_map_view {
 public:
  // The master that serves `slot` now, or null.
  virtual std::shared_ptr<cluster_node> owner(std::uint16_t slot) const = 0;
  // Reads the map again; `done` with the outcome (null: nobody waits).
  virtual void refresh(std::function<void(error_code)> done) = 0;
  // Reads it again in the background, unless that was done a moment ago.
  virtual void refresh_soon() = 0;

 protected:
  ~slot_map_view() = default;
};

// Every member may be called from any thread (one mutex, which is held when
// it asks the map, never the other way round); callbacks run on the
// executor.
class cluster_channels final : public subscription_owner, public std::enable_shared_from_this<cluster_channels> {
 public:
  // `max_redirects`: subscribes refused with MOVED (or lost with their
  // node) tried again before the listeners hear the error; `retry_wait`:
  // the pause before a failed resubscribe is tried again.
  cluster_channels(asio::any_io_executor ex, std::weak_ptr<slot_map_view> map, int max_redirects,
                   std::chrono::milliseconds retry_wait)
      : ex_(std::move(ex)), map_(std::move(map)), max_redirects_(max_redirects), retry_wait_(retry_wait) {}

  // Adds a listener of `channel`; `done` gets its subscription once the
  // channel is subscribed at its slot's master (at once if it is).
  void subscribe(std::string channel, listener l, subscribe_done done) {
    gate(l, done);
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
    // The node's subscription ends on the executor, not here: this may run
    // inside a listener of this channel (resetting its own subscription,
    // its gate held) while the node's strand, its own gate held, waits in
    // deliver() for that listener's gate; ending the node's subscription
    // here would wait for the node's gate, and neither would go on. Its
    // listener finds no listeners of the channel meanwhile.
    if (!dropped.active()) return;
    try {
      asio::post(ex_, [d = std::make_shared<subscription>(std::move(dropped))] { d->reset(); });
    } catch (...) {
      // Only allocation can fail: the subscription then ends here.
    }
  }

  std::size_t channel_count() const {
    std::lock_guard g(m_);
    return channel_count_;
  }

  // Ends every channel: subscribes still waiting hear shutting_down, and
  // new ones too.
  void stop() {
    std::map<std::string, channel_entry> channels;
    {
      std::lock_guard g(m_);
      stopped_ = true;
      channels.swap(channels_);
      channel_count_ = 0;
    }
    // Outside the mutex: a listener's or a callback's destructor may call
    // back in.
    for (auto& [name, e] : channels)
      for (auto& [id, p] : e.pending) p.done(error_code(error::shutting_down), subscription());
  }

  // The map changed (read again, or a MOVED learned): channels whose slot
  // another master serves now move there.
  void map_changed() {
    auto map = map_.lock();
    if (!map) return;
    std::vector<std::string> moving;
    {
      std::lock_guard g(m_);
      for (auto& [name, e] : channels_) {
        if (!e.confirmed || !e.at) continue;
        auto now = map->owner(e.slot);
        if (now && now != e.at) moving.push_back(name);
      }
    }
    for (auto& ch : moving) resubscribe(ch);
  }

  // The node no longer serves `channel` (its slot moved): subscribe where
  // the map says now, once it was read again.
  void channel_lost(const std::shared_ptr<cluster_node>& node, const std::string& channel) {
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || it->second.at != node) return;
    }
    if (auto map = map_.lock())
      map->refresh([self = shared_from_this(), channel](error_code) { self->resubscribe(channel); });
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


  // Subscribes `channel` at the master of its slot (reading the map first
  // when there is none for it).
  void subscribe_at_owner(const std::string& channel, int attempt) {
    std::uint16_t slot = key_slot(channel);
    auto map = map_.lock();
    if (!map) return subscribe_failed(channel, error::shutting_down, attempt);
    auto node = map->owner(slot);
    if (!node) {
      map->refresh([self = shared_from_this(), map, channel, attempt, slot](error_code ec) {
        if (!ec && map->owner(slot)) return self->subscribe_at_owner(channel, attempt);
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
    std::weak_ptr<cluster_channels> weak = weak_from_this();
    listener forward = [weak, channel](std::optional<std::string_view> m) {
      if (auto self = weak.lock()) self->deliver(channel, m);
    };
    // The node only weakly: this callback waits inside the node's own
    // subscriber, which the node owns (a strong reference would keep a
    // node whose subscribe never completes alive for ever).
    std::weak_ptr<cluster_node> weak_node = node;
    node->backend->async_subscribe(
        channel, std::move(forward),
        asio::bind_executor(ex_, [self = shared_from_this(), channel, weak_node, generation, attempt](
                                     error_code ec, subscription sub) {
          auto node = weak_node.lock();
          if (!node && !ec) ec = error::shutting_down;
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
          attempt < max_redirects_) {
        // The map is stale, or the master is gone: read it, then try where
        // it says.
        if (auto map = map_.lock()) {
          map->refresh([self = shared_from_this(), channel, attempt](error_code) {
            self->subscribe_at_owner(channel, attempt + 1);
          });
          return;
        }
      }
      subscribe_failed(channel, ec, attempt, sub.server_reply());
      return;
    }
    std::vector<std::pair<subscribe_done, subscription>> confirmed;
    std::vector<listener> told;
    bool moved_meanwhile = false;
    // Ended outside the mutex: a subscription's end waits for a call of its
    // listener (deliver), which takes the mutex.
    subscription replaced;
    {
      std::lock_guard g(m_);
      auto it = channels_.find(channel);
      if (it == channels_.end() || it->second.generation != generation || stopped_) return;  // sub unsubscribes
      auto& e = it->second;
      // The map changed while this subscribe was on its way (a move or a
      // loss learned then was not acted on: it was in flight).
      auto map = map_.lock();
      auto now = map ? map->owner(e.slot) : nullptr;
      moved_meanwhile = now && now != node;
      replaced = std::move(e.node_sub);
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
    if (moved_meanwhile) resubscribe(channel);
  }

  // A subscribe that failed: the new listeners hear the error; listeners
  // from before (a move) hear once that they may miss messages, and it is
  // tried again after a pause.
  // `refusal`: the server's words, when it refused the subscribe.
  void subscribe_failed(const std::string& channel, error_code ec, int attempt, const std::string& refusal = {}) {
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
    for (auto& d : failed) d(ec, make_refusal(refusal));
    for (auto& l : told) call_listener(channel, l, std::nullopt);
    if (!retry) return;
    auto timer = std::make_shared<asio::steady_timer>(ex_, retry_wait_);
    timer->async_wait([self = shared_from_this(), timer, channel, attempt](error_code) {
      auto map = self->map_.lock();
      if (!map) return self->subscribe_failed(channel, error::shutting_down, attempt);
      map->refresh([self, channel, attempt](error_code) { self->subscribe_at_owner(channel, attempt + 1); });
    });
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
    if (!message)
      if (auto map = map_.lock()) map->refresh_soon();
    for (auto& l : targets) call_listener(channel, l, message);
  }

  asio::any_io_executor ex_;
  std::weak_ptr<slot_map_view> map_;
  const int max_redirects_;
  const std::chrono::milliseconds retry_wait_;
  mutable std::mutex m_;
  std::map<std::string, channel_entry> channels_;
  std::size_t channel_count_ = 0;
  std::uint64_t next_id_ = 0;
  bool stopped_ = false;
};

}  // namespace dlock::redis::detail
