// SentinelBackend's compiled part: asking the sentinels where the master is
// (the address source its connections use), and following failovers that
// the sentinels announce on `+switch-master`.
#include <dlock/backend/sentinel.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <mutex>
#include <variant>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <dlock/redis/address_source.hpp>

#include "ask_once.hpp"

namespace dlock::redis::detail {
namespace {

using std::chrono::milliseconds;


std::optional<address> read_master_address(const value& v) {
  if (!v.is_array() || v.elements.size() != 2 || !v.elements[0].is_string() || !v.elements[1].is_string())
    return std::nullopt;
  const auto& p = v.elements[1].str;
  unsigned port = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535) return std::nullopt;
  return address{config::transport::tcp, v.elements[0].str, static_cast<std::uint16_t>(port), {}};
}


}  // namespace

// Finds the master by asking the sentinels in turn; the first that answers
// is asked first from then on (the order Redis's guide for Sentinel clients
// gives).
class sentinel_source final : public address_source, public std::enable_shared_from_this<sentinel_source> {
 public:
  explicit sentinel_source(const sentinel_config& cfg)
      : order_(cfg.sentinels),
        name_(cfg.master_name),
        user_(cfg.sentinel_user),
        password_(cfg.sentinel_password),
        limit_(cfg.master.connect_timeout),
        limits_(cfg.master.limits),
        tls_(shared_tls_client(cfg.sentinel_tls)) {}

  void async_find(asio::any_io_executor ex, std::function<void(error_code, address)> done) override {
    asio::co_spawn(ex, find(shared_from_this()),
                   [done = std::move(done)](std::exception_ptr e, std::pair<error_code, address> r) {
                     if (e) done(error::no_sentinel, {});
                     else done(r.first, std::move(r.second));
                   });
  }

  std::optional<address> last_found() const override {
    std::lock_guard g(mutex_);
    return last_;
  }
  std::uint64_t generation() const override { return generation_.load(); }

  // Records `a` as the master; true when it differs from the one before.
  // With `asked_at` (the generation when the question was asked), only if
  // nothing newer was recorded meanwhile: a slow sentinel's old answer
  // must not replace a failover announced since.
  bool note(const address& a, std::optional<std::uint64_t> asked_at = std::nullopt) {
    std::lock_guard g(mutex_);
    if (last_ == a || (asked_at && *asked_at != generation_.load())) return false;
    if (last_) ++moves_;
    last_ = a;
    ++generation_;
    return true;
  }

  std::size_t moves() const {
    std::lock_guard g(mutex_);
    return moves_;
  }

  // The sentinels, the one that answered last first.
  std::vector<address> sentinels() const {
    std::lock_guard g(mutex_);
    return order_;
  }

 private:
  static asio::awaitable<std::pair<error_code, address>> find(std::shared_ptr<sentinel_source> self) {
    const auto asked_at = self->generation();
    request req;
    push_auth(req, self->user_, self->password_);
    req.push("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self->name_);
    bool unknown = false, refused_auth = false, reached = false;
    error_code tls_failure;  // the last sentinel's TLS failure, if any
    for (const auto& sentinel : self->sentinels()) {
      auto [ec, replies] = co_await ask_once(sentinel, req, self->limit_, self->limits_, self->tls_);
      if (is_tls_error(ec)) tls_failure = ec;
      if (ec || replies.size() != req.size()) continue;
      // AUTH refused, or a sentinel that wants a password we do not have.
      if ((!self->password_.empty() && replies.front().is_error()) || refuses_auth(replies.back())) {
        refused_auth = true;
        continue;
      }
      reached = true;
      const value& answer = replies.back();
      if (answer.is_null()) {
        unknown = true;  // this one does not monitor that name; another may
        continue;
      }
      if (auto found = read_master_address(answer)) {
        self->prefer(sentinel);
        self->note(*found, asked_at);
        co_return std::pair{error_code{}, std::move(*found)};
      }
      // An error (not a sentinel?) or an answer of another shape: ask the next.
    }
    if (unknown) co_return std::pair{error_code(error::unknown_master), address{}};
    if (refused_auth && !reached) co_return std::pair{error_code(error::auth_failed), address{}};
    // No sentinel reached, and TLS said why: that is the thing to fix.
    if (tls_failure && !reached) co_return std::pair{tls_failure, address{}};
    co_return std::pair{error_code(error::no_sentinel), address{}};
  }

  void prefer(const address& sentinel) {
    std::lock_guard g(mutex_);
    auto it = std::find(order_.begin(), order_.end(), sentinel);
    if (it != order_.end()) std::rotate(order_.begin(), it, it + 1);
  }

  mutable std::mutex mutex_;
  std::vector<address> order_;
  std::optional<address> last_;
  std::size_t moves_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  const std::string name_, user_, password_;
  const milliseconds limit_;
  const parser_limits limits_;
  const std::shared_ptr<const tls_client> tls_;  // null: the sentinels speak plain text
};

namespace {

// Where the watch connects: the sentinels in turn, the one the master was
// last found through first.
class sentinel_rotation final : public address_source {
 public:
  // Over a list fixed here (the source reorders its own), starting with the
  // sentinel the master was found through.
  explicit sentinel_rotation(const sentinel_source& source) : sentinels_(source.sentinels()) {}

  void async_find(asio::any_io_executor ex, std::function<void(error_code, address)> done) override {
    auto pick = sentinels_.at(next_++ % sentinels_.size());
    asio::post(ex, [done = std::move(done), pick = std::move(pick)] { done({}, pick); });
  }
  std::optional<address> last_found() const override { return std::nullopt; }
  std::uint64_t generation() const override { return 0; }

 private:
  const std::vector<address> sentinels_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace

// What the watch's listener and its retries share with the backend, which
// may be destroyed while they run on the I/O thread: they act only while
// `backend` is set, under the mutex.
struct sentinel_follower : std::enable_shared_from_this<sentinel_follower> {
  std::mutex mutex;
  RedisBackend* backend = nullptr;
  std::shared_ptr<sentinel_source> source;
  subscriber* watch = nullptr;
  std::string master_name;
  subscription switch_subscription;
  std::unique_ptr<asio::steady_timer> retry;          // subscribing again
  std::unique_ptr<asio::steady_timer> recheck_timer;  // asking the sentinels again
  milliseconds retry_wait{};

  // The master is at `to`: connections elsewhere move there.
  void moved(const address& to) {
    std::lock_guard g(mutex);
    if (!backend) return;
    source->note(to);
    backend->server_moved(to);
  }

  // Asks the sentinels again (an announcement may have been missed).
  void recheck() {
    asio::any_io_executor ex;
    {
      std::lock_guard g(mutex);
      if (!backend) return;
      ex = backend->get_executor();
    }
    source->async_find(ex, [weak = weak_from_this()](error_code ec, address a) {
      auto self = weak.lock();
      if (!self) return;
      if (!ec) {
        self->moved(a);
        return;
      }
      // No sentinel answered: ask again later, or a missed announcement
      // would stay missed until a connection breaks.
      self->later(self->recheck_timer, &sentinel_follower::recheck);
    });
  }

  // Runs `step` again after retry_wait on `timer`, unless stopped by then.
  void later(std::unique_ptr<asio::steady_timer>& timer, void (sentinel_follower::*step)()) {
    std::lock_guard g(mutex);
    if (!backend) return;
    timer->expires_after(retry_wait);
    timer->async_wait([weak = weak_from_this(), step](error_code ec) {
      if (auto self = weak.lock(); self && !ec) ((*self).*step)();
    });
  }

  // "+switch-master <name> <old ip> <old port> <new ip> <new port>".
  void on_message(std::optional<std::string_view> message) {
    if (!message) {
      recheck();  // subscribed again after a reconnect: something may have been missed
      return;
    }
    std::vector<std::string_view> words;
    for (std::size_t start = 0; start <= message->size();) {
      auto space = message->find(' ', start);
      if (space == std::string_view::npos) space = message->size();
      words.push_back(message->substr(start, space - start));
      start = space + 1;
    }
    if (words.size() != 5 || words[0] != master_name) return;
    unsigned port = 0;
    auto [end, ec] = std::from_chars(words[4].data(), words[4].data() + words[4].size(), port);
    if (ec != std::errc() || end != words[4].data() + words[4].size() || port == 0 || port > 65535) return;
    moved(address{config::transport::tcp, std::string(words[3]), static_cast<std::uint16_t>(port), {}});
  }

  void subscribe() {
    // Under the mutex, so that the backend cannot destroy the watch
    // meanwhile. The completion takes the mutex too, but it is always
    // posted, never run inside async_subscribe.
    std::lock_guard g(mutex);
    if (!backend) return;
    std::weak_ptr<sentinel_follower> weak = weak_from_this();
    watch->async_subscribe(
        "+switch-master",
        [weak](std::optional<std::string_view> m) {
          if (auto self = weak.lock()) self->on_message(m);
        },
        [weak](error_code ec, subscription s) {
          auto self = weak.lock();
          if (!self) return;
          if (!ec) {
            // One it replaces ends outside the mutex: a subscription's end
            // waits for a call of its listener, which may take the mutex.
            subscription replaced;
            {
              std::lock_guard g2(self->mutex);
              if (!self->backend) return;
              replaced = std::move(self->switch_subscription);
              self->switch_subscription = std::move(s);
            }
            self->recheck();  // a failover between the first connect and now
            return;
          }
          self->later(self->retry, &sentinel_follower::subscribe);
        });
  }

  void stop() {
    subscription s;  // removed outside the lock
    std::lock_guard g(mutex);
    backend = nullptr;
    retry.reset();  // cancels a pending retry
    recheck_timer.reset();
    s = std::move(switch_subscription);
  }
};

}  // namespace dlock::redis::detail

namespace dlock {
namespace {

std::shared_ptr<redis::detail::sentinel_source> make_source(const redis::sentinel_config& cfg) {
  if (cfg.sentinels.empty())
    throw std::system_error(make_error_code(error::invalid_argument), "SentinelBackend: no sentinel address");
  if (cfg.master_name.empty())
    throw std::system_error(make_error_code(error::invalid_argument), "SentinelBackend: empty master name");
  return std::make_shared<redis::detail::sentinel_source>(cfg);
}

redis::config master_settings(const redis::sentinel_config& cfg,
                              const std::shared_ptr<redis::detail::sentinel_source>& source) {
  auto out = cfg.master;
  redis::detail::settle_acknowledge(out, true);
  out.source = source;
  out.require_master = true;
  return out;
}

}  // namespace

SentinelBackend::SentinelBackend(std::string_view url) : SentinelBackend(redis::parse_sentinel_url(url)) {}

SentinelBackend::SentinelBackend(redis::sentinel_config cfg) : SentinelBackend(with_source{}, make_source(cfg), cfg) {}

SentinelBackend::SentinelBackend(executor_type ex, redis::sentinel_config cfg)
    : SentinelBackend(with_source{}, std::move(ex), make_source(cfg), cfg) {}

SentinelBackend::SentinelBackend(executor_type ex, std::string_view url)
    : SentinelBackend(std::move(ex), redis::parse_sentinel_url(url)) {}

SentinelBackend::SentinelBackend(with_source, std::shared_ptr<redis::detail::sentinel_source> source,
                                 redis::sentinel_config cfg)
    : RedisBackend(master_settings(cfg, source)), sentinel_cfg_(std::move(cfg)), source_(std::move(source)) {
  start_watch();
}

SentinelBackend::SentinelBackend(with_source, executor_type ex,
                                 std::shared_ptr<redis::detail::sentinel_source> source, redis::sentinel_config cfg)
    : RedisBackend(std::move(ex), master_settings(cfg, source)),
      sentinel_cfg_(std::move(cfg)),
      source_(std::move(source)) {
  start_watch();
}

void SentinelBackend::start_watch() {
  auto watch_cfg = sentinel_cfg_.master;
  watch_cfg.user = sentinel_cfg_.sentinel_user;
  watch_cfg.password = sentinel_cfg_.sentinel_password;
  watch_cfg.database = 0;
  watch_cfg.tls = sentinel_cfg_.sentinel_tls;
  watch_cfg.source = std::make_shared<redis::detail::sentinel_rotation>(*source_);
  watch_cfg.require_master = false;
  watch_ = std::make_unique<redis::subscriber>(get_executor(), watch_cfg);
  follower_ = std::make_shared<redis::detail::sentinel_follower>();
  follower_->backend = this;
  follower_->source = source_;
  follower_->watch = watch_.get();
  follower_->master_name = sentinel_cfg_.master_name;
  follower_->retry = std::make_unique<redis::asio::steady_timer>(get_executor());
  follower_->recheck_timer = std::make_unique<redis::asio::steady_timer>(get_executor());
  follower_->retry_wait = watch_cfg.reconnect_wait_max;
  watch_->start();
  follower_->subscribe();
}

SentinelBackend::~SentinelBackend() {
  if (follower_) follower_->stop();
  core().clear_services();  // they refer to this object, whose members go first
  if (watch_) watch_->stop();
}

std::optional<redis::address> SentinelBackend::master_address() const { return source_->last_found(); }

std::size_t SentinelBackend::failovers_seen() const noexcept { return source_->moves(); }

}  // namespace dlock
