// RedlockBackend's compiled part: the nodes, the first connects, and the
// backend's own calls, run on every node and gathered with a deadline.
#include <dlock/backend/redlock.hpp>

#include <future>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

namespace dlock {

namespace {

// Settings that cannot make a Redlock quorum say so before anything connects.
void check_quorum(const redis::redlock_config& cfg) {
  auto refuse = [](const std::string& why) {
    throw std::system_error(make_error_code(error::invalid_argument), "RedlockBackend: " + why);
  };
  const auto n = cfg.nodes.size();
  if (n < 3 || n % 2 == 0)
    refuse("a quorum needs an odd number of nodes, at least 3 (got " + std::to_string(n) + ")");
  if (cfg.reply_timeout <= std::chrono::milliseconds::zero()) refuse("reply_timeout must be positive");
  std::set<std::string> seen;
  for (const auto& node : cfg.nodes) {
    auto where = redis::address::of(node).describe();
    if (!seen.insert(where).second) refuse("node " + where + " is named twice (the nodes must be distinct servers)");
    if (node.acknowledge && node.acknowledge->replicas != redis::replica_ack::none)
      refuse("node " + where + " has replica acknowledgement on (Redlock's nodes are independent masters)");
    if (node.source) refuse("node " + where + " has an address source (Redlock's nodes are fixed servers)");
  }
}

redis::redlock_config from_urls(const std::vector<std::string>& urls) {
  redis::redlock_config cfg;
  for (const auto& url : urls) cfg.nodes.push_back(redis::parse_url(url));
  return cfg;
}

}  // namespace

RedlockBackend::RedlockBackend(std::string_view url) : RedlockBackend(redis::parse_redlock_url(url)) {}

RedlockBackend::RedlockBackend(const std::vector<std::string>& urls) : RedlockBackend(from_urls(urls)) {}

RedlockBackend::RedlockBackend(redis::redlock_config cfg) : cfg_(std::move(cfg)) {
  check_quorum(cfg_);
  channels_ = std::make_shared<channels>();
  try {
    for (const auto& node : cfg_.nodes) nodes_.push_back(std::make_unique<RedisBackend>(core_.get_executor(), node));
    core_.start_thread();
    wait_first_connects();
  } catch (...) {
    for (auto& n : nodes_) n->stop();
    core_.drain();
    core_.stop();
    nodes_.clear();
    throw;
  }
}

RedlockBackend::~RedlockBackend() {
  core_.clear_services();  // they use the nodes
  for (auto& n : nodes_) n->stop();
  // Node operations still queued (a stalled node's, and those waiting for
  // their turn behind them) now fail with shutting_down, each a few posted
  // steps after the one before it: the thread runs them to their end
  // (drain), so that none is left suspended when it stops (their frames,
  // strands and the connection's queue would keep each other alive:
  // LeakSanitizer found them).
  core_.drain();
  // The thread ends before the nodes go: nothing may resume after this and
  // use a node.
  core_.stop();
  nodes_.clear();
}

// Every node's first connect, at once; a majority must make it.
void RedlockBackend::wait_first_connects() {
  std::vector<std::promise<redis::error_code>> done(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    nodes_[i]->connection().async_wait_connected([&done, i](redis::error_code ec) { done[i].set_value(ec); });
  std::size_t up = 0;
  std::string down;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto ec = done[i].get_future().get();
    if (!ec) {
      ++up;
      continue;
    }
    auto why = nodes_[i]->connection().last_connect_failure();
    down += (down.empty() ? "" : ", ") + node_name(i) + " (" + ec.message() + (why.empty() ? "" : ": " + why) + ")";
  }
  if (up < ext::majority_of(nodes_.size()))
    throw std::system_error(make_error_code(error::no_quorum),
                            "RedlockBackend: " + std::to_string(up) + " of " + std::to_string(nodes_.size()) +
                                " nodes could be reached, a majority is " +
                                std::to_string(ext::majority_of(nodes_.size())) + "; cannot connect to " + down);
}

std::string RedlockBackend::node_name(std::size_t i) const { return redis::address::of(cfg_.nodes[i]).describe(); }

bool RedlockBackend::node_available(std::size_t i) const noexcept {
  return nodes_[i]->connection().statistics().up;
}

redis::value RedlockBackend::no_reply(std::size_t node, const redis::error_code& ec) const {
  return redis::value::make_string(
      "DLOCK " + node_name(node) + ": " + (ec ? ec.message() : "no reply within " + std::to_string(cfg_.reply_timeout.count()) + " ms"),
      redis::kind::error);
}

namespace {

// Runs `start(i, deliver)` for each node (or delivers `not_connected` for
// a node that is down), and completes `done` with what came by the deadline.
template <class T, class Start, class Done>
void on_nodes(RedlockBackend& b, Start start, Done done) {
  const auto n = b.node_count();
  auto gather = std::make_shared<ext::fan_in<T>>(b.get_executor(), n, std::move(done));
  for (std::size_t i = 0; i < n; ++i) {
    if (!b.node_available(i)) {
      T down;
      down.first = make_error_code(error::not_connected);
      gather->deliver(i, std::move(down));
      continue;
    }
    start(i, [gather, i](redis::error_code ec, auto v) { gather->deliver(i, T{ec, std::move(v)}); });
  }
  gather->arm(ext::steady::now() + b.reply_timeout());
}

}  // namespace

// The subscriptions of one channel over every node, behind one handle.
class RedlockBackend::channels final : public redis::detail::subscription_owner,
                                       public std::enable_shared_from_this<channels> {
 public:
  void subscribe(RedlockBackend& b, std::string channel, redis::listener l,
                 std::function<void(redis::error_code, redis::subscription)> done) {
    gate(l, done);  // the handle's reset() is final for every node's delivery
    using one = std::pair<redis::error_code, redis::subscription>;
    auto self = shared_from_this();
    const auto need = ext::majority_of(b.node_count());
    on_nodes<one>(
        b, [&](std::size_t i, auto deliver) { b.node(i).async_subscribe(channel, l, std::move(deliver)); },
        [self, channel, need, done = std::move(done)](std::vector<std::optional<one>> got) mutable {
          std::vector<redis::subscription> subs;
          std::string refusal;
          for (auto& r : got) {
            if (r && !r->first && r->second.active()) subs.push_back(std::move(r->second));
            else if (r && !r->second.server_reply().empty()) refusal = r->second.server_reply();
          }
          if (subs.size() < need) {
            for (auto& s : subs) s.reset();
            if (!refusal.empty()) return done(make_error_code(error::server_error), make_refusal(refusal));
            return done(make_error_code(error::no_quorum), redis::subscription{});
          }
          done(redis::error_code{}, self->keep(channel, std::move(subs)));
        });
  }

  void remove_listener(std::string, std::uint64_t id) noexcept override {
    std::vector<redis::subscription> ending;
    {
      std::lock_guard g(m_);
      auto it = subs_.find(id);
      if (it == subs_.end()) return;
      ending = std::move(it->second);
      subs_.erase(it);
    }
    for (auto& s : ending) s.reset();  // outside the mutex: each waits for its listener
  }

 private:
  redis::subscription keep(const std::string& channel, std::vector<redis::subscription> subs) {
    std::lock_guard g(m_);
    const auto id = ++next_;
    subs_.emplace(id, std::move(subs));
    return make_subscription(weak_from_this(), channel, id);
  }

  std::mutex m_;
  std::uint64_t next_ = 0;
  std::map<std::uint64_t, std::vector<redis::subscription>> subs_;
};

void RedlockBackend::subscribe_on_nodes(std::string channel, redis::listener l,
                                        std::function<void(redis::error_code, redis::subscription)> done) {
  channels_->subscribe(*this, std::move(channel), std::move(l), std::move(done));
}

void RedlockBackend::exec_on_nodes(redis::request req, std::function<void(redis::error_code, redis::response)> done) {
  using one = std::pair<redis::error_code, redis::response>;
  on_nodes<one>(
      *this, [&](std::size_t i, auto deliver) { nodes_[i]->async_exec("", req, std::move(deliver)); },
      [this, done = std::move(done)](std::vector<std::optional<one>> got) {
        redis::response out;
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (!got[i] || got[i]->first) {
            out.push_back(no_reply(i, got[i] ? got[i]->first : redis::error_code{}));
            continue;
          }
          redis::value v;
          v.type = redis::kind::array;
          v.elements = std::move(got[i]->second);
          out.push_back(std::move(v));
        }
        done(redis::error_code{}, std::move(out));
      });
}

void RedlockBackend::eval_on_nodes(const redis::script& s, std::vector<std::string> keys, std::vector<std::string> args,
                                   std::function<void(redis::error_code, redis::value)> done) {
  using one = std::pair<redis::error_code, redis::value>;
  on_nodes<one>(
      *this, [&](std::size_t i, auto deliver) { nodes_[i]->async_eval(s, keys, args, std::move(deliver)); },
      [this, done = std::move(done)](std::vector<std::optional<one>> got) {
        redis::value out;
        out.type = redis::kind::array;
        for (std::size_t i = 0; i < got.size(); ++i) {
          // A server's error reply is that node's reply; any other failure, none.
          if (got[i] && (!got[i]->first || got[i]->second.is_error())) out.elements.push_back(std::move(got[i]->second));
          else out.elements.push_back(no_reply(i, got[i] ? got[i]->first : redis::error_code{}));
        }
        done(redis::error_code{}, std::move(out));
      });
}

void RedlockBackend::eval_all_on_nodes(std::vector<redis::script_call> calls,
                                       std::function<void(std::vector<redis::call_result>)> done) {
  using one = std::pair<redis::error_code, std::vector<redis::call_result>>;
  const auto count = calls.size();
  on_nodes<one>(
      *this,
      [&](std::size_t i, auto deliver) {
        nodes_[i]->async_eval_all(calls, [deliver = std::move(deliver)](std::vector<redis::call_result> r) mutable {
          deliver(redis::error_code{}, std::move(r));
        });
      },
      [this, count, done = std::move(done)](std::vector<std::optional<one>> got) {
        std::vector<redis::call_result> out(count);
        for (std::size_t c = 0; c < count; ++c) {
          auto& v = out[c].reply;
          v.type = redis::kind::array;
          for (std::size_t i = 0; i < got.size(); ++i) {
            const bool answered = got[i] && !got[i]->first && c < got[i]->second.size() && !got[i]->second[c].ec;
            if (answered) v.elements.push_back(std::move(got[i]->second[c].reply));
            else if (got[i] && !got[i]->first && c < got[i]->second.size())
              v.elements.push_back(no_reply(i, got[i]->second[c].ec));
            else v.elements.push_back(no_reply(i, got[i] ? got[i]->first : redis::error_code{}));
          }
        }
        done(std::move(out));
      });
}

}  // namespace dlock
