// The shared subscriber: channel reference counts, SUBSCRIBE confirmations,
// message fan-out, and resubscription after every reconnect.
#include <dlock/redis/subscriber.hpp>

#include <atomic>
#include <cstdio>
#include <exception>
#include <map>
#include <unordered_map>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dlock::redis {
namespace detail {

class subscriber_impl : public subscription_owner, public std::enable_shared_from_this<subscriber_impl> {
 public:
  subscriber_impl(asio::any_io_executor ex, config cfg)
      : conn_(std::move(ex), std::move(cfg)), retry_timer_(conn_.get_executor()) {}

  // Wires the connection to this object; called once right after construction.
  void attach() {
    std::weak_ptr<subscriber_impl> weak = weak_from_this();
    conn_.set_push_handler([weak](value& v) {
      auto self = weak.lock();
      return self ? self->on_push(v) : v.elements[0].str != "sunsubscribe";
    });
    conn_.set_connect_handler([weak] {
      if (auto self = weak.lock()) self->on_connect();
    });
  }

  asio::any_io_executor executor() const noexcept { return conn_.get_executor(); }
  void set_lost_handler(std::function<void(const std::string&)> h) { lost_handler_ = std::move(h); }
  connection& link() noexcept { return conn_; }

  void stop() {
    asio::dispatch(executor(), [self = shared_from_this()] {
      self->stopped_ = true;
      self->retry_timer_.cancel();
    });
    conn_.stop();
  }

  // All of the following run on the connection's strand.

  void add(std::string channel, listener l, std::function<void(error_code, subscription)> done) {
    gate(l, done);
    auto [it, created] = channels_.try_emplace(channel);
    entry& e = it->second;
    if (created) e.generation = ++next_generation_;
    channel_count_.store(channels_.size());
    std::uint64_t id = ++next_id_;
    e.listeners.emplace(id, std::move(l));
    if (e.confirmed) {
      done({}, make_subscription(weak_from_this(), std::move(channel), id));
      return;
    }
    e.waiters.push_back({id, std::move(done)});
    if (e.subscribes_in_flight == 0) send_subscribe(it->first, e, false);
  }

  void remove(const std::string& channel, std::uint64_t id) {
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    it->second.listeners.erase(id);
    if (!it->second.listeners.empty() || !it->second.waiters.empty()) return;
    channels_.erase(it);
    channel_count_.store(channels_.size());
    request req;
    req.push(sharded() ? "SUNSUBSCRIBE" : "UNSUBSCRIBE", channel);
    // Nothing waits for this: the next SUBSCRIBE of the channel (if any) is
    // queued after it, and a message for a channel we dropped is ignored.
    // A SUNSUBSCRIBE's reply looks like a node's own push: count it, so
    // that on_push tells them apart; one that will never be answered (the
    // connection failed) is no longer counted.
    if (sharded()) ++unsubscribes_in_flight_[channel];
    std::weak_ptr<subscriber_impl> weak = weak_from_this();
    const auto sent_on = connects_;
    // An error reply (MOVED: the node no longer serves the slot) answers it
    // without a "sunsubscribe" frame, so on_push never counted it.
    conn_.async_exec(std::move(req), [weak, channel, sent_on](error_code ec, response r) {
      auto self = weak.lock();
      if (!self || !self->sharded()) return;
      if (!ec && !(r.size() == 1 && r[0].is_error())) return;
      auto it = self->unsubscribes_in_flight_.find(channel);
      if (it != self->unsubscribes_in_flight_.end() && --it->second == 0) self->unsubscribes_in_flight_.erase(it);
      // Written, and not answered within the command timeout: its frame may
      // still come on this connection, and would then pass for the node's
      // own push (leaving its place to the next reply). A new connection
      // ends the doubt; every channel is subscribed again there, and its
      // listeners told to look for themselves.
      if (ec == error::outcome_unknown && self->connects_ == sent_on && !self->stopped_)
        self->conn_.drop_connection();
    });
  }

  void remove_listener(std::string channel, std::uint64_t id) noexcept override {
    try {
      asio::dispatch(executor(), [self = shared_from_this(), channel = std::move(channel), id] {
        self->remove(channel, id);
      });
    } catch (...) {
      // Only allocation can fail here; the listener then stays registered
      // until the subscriber is destroyed, which is harmless.
    }
  }

  std::size_t channel_count() const { return channel_count_.load(); }
  std::size_t message_count() const { return message_count_.load(std::memory_order_relaxed); }

 private:
  struct waiter {
    std::uint64_t id;
    std::function<void(error_code, subscription)> done;
  };
  struct entry {
    std::map<std::uint64_t, listener> listeners;
    std::vector<waiter> waiters;  // listeners whose subscription is not confirmed yet
    // Tells this entry from an earlier one of the same channel (erased,
    // its UNSUBSCRIBE queued): only its own SUBSCRIBEs' replies count.
    std::uint64_t generation = 0;
    bool confirmed = false;
    bool told_deaf = false;  // listeners heard that a resubscribe failed
    bool lost = false;       // a node dropped or refused it (sharded): the lost handler moves it
    int subscribes_in_flight = 0;
  };

  // `resync`: the channel was subscribed on an earlier connection, so its
  // listeners hear (std::nullopt) that messages may have been missed once
  // it is subscribed again.
  void send_subscribe(const std::string& channel, entry& e, bool resync) {
    ++e.subscribes_in_flight;
    request req;
    req.push(sharded() ? "SSUBSCRIBE" : "SUBSCRIBE", channel);
    std::weak_ptr<subscriber_impl> weak = weak_from_this();
    conn_.async_exec(std::move(req), [weak, channel, generation = e.generation, resync](error_code ec, response r) {
      auto self = weak.lock();
      if (!self) return;
      std::string refusal;  // the server's words, when it refused
      if (!ec && (r.size() != 1 || r[0].is_error())) {
        ec = r.size() == 1 && is_redirect(r[0]) ? error::slot_moved : error::server_error;
        if (ec == error::server_error && r.size() == 1) refusal = r[0].str;
      }
      self->on_subscribed(channel, generation, resync, ec, refusal);
    });
  }

  void on_subscribed(const std::string& channel, std::uint64_t generation, bool resync, error_code ec,
                     const std::string& refusal) {
    auto it = channels_.find(channel);
    // Every listener left meanwhile; or they did, and new ones came whose
    // own SUBSCRIBE is queued after the UNSUBSCRIBE: this reply, older than
    // both, confirms nothing for them.
    if (it == channels_.end() || it->second.generation != generation) return;
    entry& e = it->second;
    --e.subscribes_in_flight;
    if (!ec) e.confirmed = true;
    if (!ec || e.subscribes_in_flight == 0) {
      auto waiters = std::move(e.waiters);
      e.waiters.clear();
      for (auto& w : waiters) {
        if (ec) {
          e.listeners.erase(w.id);
          w.done(ec, make_refusal(refusal));
        } else {
          w.done({}, make_subscription(weak_from_this(), channel, w.id));
        }
      }
    }
    if (!ec) {
      e.told_deaf = false;
      if (resync) notify(channel, std::nullopt);
      return;
    }
    if (e.confirmed || e.subscribes_in_flight > 0) return;  // another one did, or may yet
    if (e.listeners.empty()) {
      channels_.erase(it);
      channel_count_.store(channels_.size());
      return;
    }
    if (ec == error::slot_moved && lost_handler_) {
      lose(channel, e);
      return;
    }
    // Listeners subscribed before a reconnect are deaf until the channel is
    // subscribed again: tell them (once) to look for themselves, and retry.
    bool tell = !e.told_deaf;
    e.told_deaf = true;
    schedule_retry();
    if (tell) notify(channel, std::nullopt);
  }

  // Resubscribes, after a pause, every channel whose resubscribe failed
  // (unless a reconnect did it meanwhile). Each attempt waits at most the
  // command timeout, so a server that stays away costs one SUBSCRIBE per
  // channel per reconnect_wait_max plus command_timeout.
  void schedule_retry() {
    if (retry_armed_ || stopped_) return;
    retry_armed_ = true;
    retry_timer_.expires_after(conn_.settings().reconnect_wait_max);
    std::weak_ptr<subscriber_impl> weak = weak_from_this();
    retry_timer_.async_wait([weak](error_code ec) {
      auto self = weak.lock();
      if (!self) return;
      self->retry_armed_ = false;
      if (ec || self->stopped_) return;
      for (auto& [channel, e] : self->channels_)
        if (!e.confirmed && !e.lost && e.subscribes_in_flight == 0 && !e.listeners.empty())
          self->send_subscribe(channel, e, true);
    });
  }

  bool sharded() const noexcept { return conn_.settings().sharded_pubsub; }

  static bool is_redirect(const value& v) {
    return v.is_error() && (v.str.compare(0, 6, "MOVED ") == 0 || v.str.compare(0, 4, "ASK ") == 0);
  }

  // A message, or (sharded) a node's own ["sunsubscribe", channel, count]:
  // the node no longer serves the channel's slot. True when `v` was a push.
  bool on_push(const value& v) {
    if (v.elements[0].str != "sunsubscribe") {
      on_message(v);
      return true;
    }
    if (v.elements.size() < 2 || !v.elements[1].is_string()) return false;
    const auto& channel = v.elements[1].str;
    if (auto it = unsubscribes_in_flight_.find(channel); it != unsubscribes_in_flight_.end()) {
      if (--it->second == 0) unsubscribes_in_flight_.erase(it);
      return false;  // the reply to our own SUNSUBSCRIBE
    }
    auto it = channels_.find(channel);
    if (it == channels_.end()) return true;
    entry& e = it->second;
    e.confirmed = false;
    if (lost_handler_) {
      lose(channel, e);
    } else if (e.subscribes_in_flight == 0) {
      send_subscribe(channel, e, true);
    }
    return true;
  }

  // Hands a channel this node will not serve to the lost handler, once
  // (its entry stays until its listeners leave, and is not subscribed here
  // again).
  void lose(const std::string& channel, entry& e) {
    if (e.lost) return;
    e.lost = true;
    auto handler = lost_handler_;
    handler(channel);
  }

  void on_message(const value& v) {
    // ["message", channel, payload], ["smessage", channel, payload] or
    // ["pmessage", pattern, channel, payload]
    const auto& el = v.elements;
    std::size_t ch = el[0].str == "pmessage" ? 2 : 1;
    if (el.size() != ch + 2 || !el[ch].is_string() || !el[ch + 1].is_string()) return;
    notify(el[ch].str, std::string_view(el[ch + 1].str));
  }

  // Calls every listener of `channel`. A listener may remove itself (or
  // others) while we iterate: call copies. A listener must not throw; one
  // that does is reported and skipped, for it runs inside the connection's
  // read loop, and its exception would cut every other listener off.
  void notify(const std::string& channel, std::optional<std::string_view> message) {
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    if (message) message_count_.fetch_add(1, std::memory_order_relaxed);
    std::vector<listener> targets;
    for (auto& [id, l] : it->second.listeners) targets.push_back(l);
    for (auto& l : targets) call_listener(channel, l, message);
  }

  void on_connect() {
    ++connects_;
    if (connects_ == 1) return;  // first connect: SUBSCRIBEs are already queued
    // A new connection has no subscriptions: restore every live channel, and
    // tell listeners once it is confirmed that messages may have been missed.
    for (auto& [channel, e] : channels_) {
      e.confirmed = false;
      if (!e.lost) send_subscribe(channel, e, true);
    }
  }

  connection conn_;
  asio::steady_timer retry_timer_;
  // Ordered: a reconnect restores a channel before the channels named after
  // it ("<channel>:dlock", a release channel's presence channel, must not be
  // up while the channel itself is not: see detail::presence_suffix).
  std::map<std::string, entry> channels_;
  std::uint64_t next_id_ = 0;
  std::uint64_t next_generation_ = 0;
  std::size_t connects_ = 0;
  std::function<void(const std::string&)> lost_handler_;
  std::unordered_map<std::string, int> unsubscribes_in_flight_;  // SUNSUBSCRIBEs not answered yet
  bool retry_armed_ = false;
  bool stopped_ = false;
  std::atomic<std::size_t> channel_count_{0};  // readable from any thread
  std::atomic<std::size_t> message_count_{0};  // messages on subscribed channels, readable from any thread
};

void call_listener(const std::string& channel, const listener& l, std::optional<std::string_view> message) noexcept {
  try {
    l(message);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlock: a listener of channel \"%s\" threw (ignored): %s\n", channel.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "dlock: a listener of channel \"%s\" threw (ignored)\n", channel.c_str());
  }
}

void subscribe(const std::shared_ptr<subscriber_impl>& impl, std::string channel, listener l,
               std::function<void(error_code, subscription)> done) {
  asio::dispatch(impl->executor(), [impl, channel = std::move(channel), l = std::move(l),
                                    done = std::move(done)]() mutable {
    impl->add(std::move(channel), std::move(l), std::move(done));
  });
}

}  // namespace detail

subscription::subscription(subscription&& other) noexcept
    : owner_(std::move(other.owner_)),
      channel_(std::move(other.channel_)),
      id_(other.id_),
      server_reply_(std::move(other.server_reply_)),
      gate_(std::move(other.gate_)) {
  other.channel_.clear();
}

subscription& subscription::operator=(subscription&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::move(other.owner_);
    channel_ = std::move(other.channel_);
    id_ = other.id_;
    server_reply_ = std::move(other.server_reply_);
    gate_ = std::move(other.gate_);
    other.channel_.clear();
  }
  return *this;
}

subscription::~subscription() { reset(); }

void subscription::reset() noexcept {
  if (gate_) {
    // After this, the listener is not called (and a call running on another
    // thread has returned): what it touches may go.
    std::lock_guard lock(gate_->m);
    gate_->open = false;
  }
  gate_.reset();
  if (channel_.empty()) return;
  if (auto owner = owner_.lock()) owner->remove_listener(std::move(channel_), id_);
  channel_.clear();
  owner_.reset();
}

subscriber::subscriber(asio::any_io_executor ex, config cfg)
    : impl_(std::make_shared<detail::subscriber_impl>(std::move(ex), std::move(cfg))) {
  impl_->attach();
}

subscriber::~subscriber() { stop(); }

void subscriber::start() { impl_->link().start(); }
void subscriber::stop() { impl_->stop(); }

std::size_t subscriber::channel_count() const { return impl_->channel_count(); }
std::size_t subscriber::message_count() const { return impl_->message_count(); }

void subscriber::set_channel_lost_handler(std::function<void(const std::string&)> handler) {
  impl_->set_lost_handler(std::move(handler));
}

connection& subscriber::link() noexcept { return impl_->link(); }

asio::any_io_executor subscriber::impl_executor(const detail::subscriber_impl& impl) noexcept {
  return impl.executor();
}

}  // namespace dlock::redis
