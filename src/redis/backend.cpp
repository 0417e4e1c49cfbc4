// RedisBackend's compiled part: the private I/O thread, the first connect,
// and the blocking forms of its operations.
#include <dlock/backend/redis.hpp>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <dlock/detail/random.hpp>
#include <dlock/redis/address_source.hpp>

#include "blocking_wait.hpp"

namespace dlock {

namespace redis::detail {

// Replica acknowledgement settings that cannot work say so before
// anything connects; then the backend's default fills in an empty one.
void settle_acknowledge(config& cfg, bool deployment) {
  if (!cfg.acknowledge) {
    if (!deployment) return;
    // The default: within 1 s, or half the command timeout when that is
    // shorter (a WAIT must end within it).
    cfg.acknowledge = replica_ack::by_default();
    cfg.acknowledge->timeout = std::min(cfg.acknowledge->timeout, cfg.command_timeout / 2);
  }
  const auto& ack = *cfg.acknowledge;
  if (ack.replicas < 1 && ack.replicas != replica_ack::all && ack.replicas != replica_ack::if_any &&
      ack.replicas != replica_ack::none)
    throw std::system_error(make_error_code(error::invalid_argument),
                            "replica acknowledgement: replicas must be at least 1, or replica_ack::all, "
                            "if_any or none");
  if (ack.replicas == replica_ack::none) {
    cfg.acknowledge.reset();
    return;
  }
  if (ack.timeout <= std::chrono::milliseconds::zero() || ack.timeout >= cfg.command_timeout)
    throw std::system_error(make_error_code(error::invalid_argument),
                            "replica acknowledgement: the WAIT timeout must be positive and shorter than the "
                            "command timeout");
}

}  // namespace redis::detail

RedisBackend::RedisBackend(std::string_view url) : RedisBackend(redis::parse_url(url)) {}

RedisBackend::RedisBackend(redis::config cfg) {
  redis::detail::settle_acknowledge(cfg, false);
  commands_ = std::make_unique<redis::connection>(core_.get_executor(), cfg);
  subscriber_ = std::make_unique<redis::subscriber>(core_.get_executor(), std::move(cfg));
  core_.start_thread();
  commands_->start();
  subscriber_->start();
  try {
    wait_first_connect();
  } catch (...) {
    commands_.reset();
    subscriber_.reset();
    core_.stop();
    throw;
  }
}

RedisBackend::RedisBackend(executor_type ex, redis::config cfg)
    : core_((redis::detail::settle_acknowledge(cfg, false), std::move(ex))),
      commands_(std::make_unique<redis::connection>(core_.get_executor(), cfg)),
      subscriber_(std::make_unique<redis::subscriber>(core_.get_executor(), std::move(cfg))) {
  commands_->start();
  subscriber_->start();
}

RedisBackend::RedisBackend(executor_type ex, std::string_view url)
    : RedisBackend(std::move(ex), redis::parse_url(url)) {}

void RedisBackend::stop() {
  if (commands_) commands_->stop();
  if (subscriber_) subscriber_->stop();
  std::lock_guard g(lanes_mutex_);
  for (auto& l : lanes_) l.conn->stop();
}

RedisBackend::~RedisBackend() {
  core_.clear_services();  // they use the connections
  stop();
  if (core_.owns_thread()) {
    // The connections' loops end once stopped: their queued requests fail,
    // and replies already read complete, each a few posted steps later.
    // The thread runs those to their end (drain), and stops before the
    // connections go: a completion run after them would use a freed
    // connection (AddressSanitizer found a renewal batch's reply doing so).
    core_.drain();
    core_.stop();
    commands_.reset();
    subscriber_.reset();
    lanes_.clear();
  }
}

int RedisBackend::replicas_wanted() const {
  if (!acknowledges()) return -1;
  // What was read at another master (before a failover) is not this one's:
  // a failover starts afresh.
  const auto now = current_master();
  std::lock_guard g(seen_mutex_);
  const int reported = reported_at_ == now ? reported_replicas_ : -1;
  const bool seen = ack_settings().replicas == redis::replica_ack::if_any && seen_at_ && seen_at_ == now;
  return redis::detail::replicas_to_ask(ack_settings(), reported, seen);
}

void RedisBackend::note_replicas(int reported) {
  if (reported < 0) return;
  auto now = current_master();
  std::lock_guard g(seen_mutex_);
  reported_replicas_ = reported;
  reported_at_ = now;
  if (reported > 0 && acknowledges() && ack_settings().replicas == redis::replica_ack::if_any) seen_at_ = std::move(now);
}

std::optional<redis::address> RedisBackend::current_master() const {
  const auto& cfg = settings();
  if (cfg.source) return cfg.source->last_found();
  return redis::address::of(cfg);
}

std::size_t RedisBackend::acknowledgement_lanes() const {
  std::lock_guard g(lanes_mutex_);
  return lanes_.size();
}

// An idle lane; else a new one while there may be more; else the least
// busy (its WAIT ends within the ack timeout).
redis::connection* RedisBackend::take_lane() {
  std::lock_guard g(lanes_mutex_);
  lane* best = nullptr;
  for (auto& l : lanes_)
    if (!best || l.busy < best->busy) best = &l;
  if ((!best || best->busy > 0) && lanes_.size() < max_acknowledgement_lanes) {
    auto conn = std::make_unique<redis::connection>(core_.get_executor(), commands_->settings());
    conn->start();
    lanes_.push_back(lane{std::move(conn), 0});
    best = &lanes_.back();
  }
  ++best->busy;
  return best->conn.get();
}

void RedisBackend::lane_done(redis::connection* c) {
  std::lock_guard g(lanes_mutex_);
  for (auto& l : lanes_)
    if (l.conn.get() == c) {
      --l.busy;
      return;
    }
}

void RedisBackend::server_moved(const redis::address& to) {
  // The count of replicas is not reset here: replicas_wanted() ignores a
  // count read at another master. Resetting it on every move, a move to the
  // same master too (a Sentinel recheck after its watch reconnects), raced
  // a blocking acquire between its ROLE and its write: not_master.
  commands_->server_moved(to);
  subscriber_->link().server_moved(to);
  std::lock_guard g(lanes_mutex_);
  for (auto& l : lanes_) l.conn->server_moved(to);
}

void RedisBackend::wait_first_connect() {
  auto r = redis::detail::wait_for<int>([this](auto cb) {
    commands_->async_wait_connected([cb = std::move(cb)](redis::error_code ec) mutable { cb(ec, 0); });
  });
  if (r.first) {
    auto why = commands_->last_connect_failure();
    throw std::system_error(r.first, "cannot connect to " + commands_->settings().describe() +
                                         (why.empty() ? "" : " (" + why + ")"));
  }
}

void RedisBackend::check_not_io_thread() const {
  if (on_io_thread())
    throw std::logic_error("dlock: a blocking RedisBackend call from its own I/O thread would deadlock");
}

namespace {

// This thread's innermost blocking_scope (each links to the one before).
thread_local const RedisBackend::blocking_scope* innermost_scope = nullptr;

}  // namespace

std::unique_ptr<redis::blocking_connection> RedisBackend::take_blocking() {
  std::unique_ptr<redis::blocking_connection> c;
  {
    std::lock_guard g(pool_mutex_);
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) return std::make_unique<redis::blocking_connection>(commands_->settings());
  // The server may have closed it while it sat idle (a restart, its
  // `timeout`): find out now, not from a command that is then "unknown".
  // A connection back from a command less than idle_check_after ago is not
  // checked: a lock's calls follow each other that closely in a busy loop,
  // where a peek per call would be a system call per command for nothing
  // (a server's `timeout` is at least a second, and a restart in that
  // instant is reported as outcome_unknown, which the lock resolves).
  if (c->is_open() && c->idle_for(std::chrono::steady_clock::now()) >= redis::blocking_connection::idle_check_after)
    c->check_idle();
  return c;
}

void RedisBackend::give_back(std::unique_ptr<redis::blocking_connection> c) {
  std::lock_guard g(pool_mutex_);
  idle_.push_back(std::move(c));
}

RedisBackend::blocking_scope::blocking_scope(RedisBackend& backend)
    : backend_(backend), conn_(backend.take_blocking()), outer_(innermost_scope) {
  innermost_scope = this;
}

RedisBackend::blocking_scope::~blocking_scope() {
  innermost_scope = outer_;
  backend_.give_back(std::move(conn_));
}

redis::blocking_connection* RedisBackend::blocking_here() const noexcept {
  for (auto* s = innermost_scope; s; s = s->outer_)
    if (&s->backend_ == this) return s->conn_.get();
  return nullptr;
}

namespace {

// A blocking connection's outcome, or nullopt when the command was not
// written (it cannot connect): the shared connection then takes it.
template <class T>
std::optional<std::pair<redis::error_code, T>> written(std::pair<redis::error_code, T> out) {
  if (out.first == condition::not_sent) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::pair<redis::error_code, redis::response>> RedisBackend::blocking_exec(std::string_view,
                                                                                        const redis::request& req) {
  auto* direct = blocking_here();
  return direct ? written(direct->exec(req)) : std::nullopt;
}

std::optional<std::pair<redis::error_code, redis::value>> RedisBackend::blocking_eval(
    const redis::script& s, const std::vector<std::string>& keys, const std::vector<std::string>& args) {
  auto* direct = blocking_here();
  return direct ? written(direct->eval(s, keys, args)) : std::nullopt;
}

std::optional<std::tuple<redis::error_code, redis::response, redis::replica_acks>>
RedisBackend::blocking_exec_acknowledged(std::string_view, const redis::request& req) {
  auto* direct = blocking_here();
  if (!direct || !acknowledges()) return std::nullopt;
  int wanted = replicas_wanted();
  if (wanted < 0) {
    // Nothing of the request is sent before ROLE answers: when it does
    // not, the asynchronous path takes the request.
    auto [ec, r] = direct->exec(redis::request().push("ROLE"));
    if (ec) return std::nullopt;
    if (r.size() == 1) note_replicas(redis::detail::replicas_in_role(r[0]));
    wanted = replicas_wanted();
    if (wanted < 0) return std::tuple{redis::error_code(error::not_master), redis::response{}, redis::replica_acks{}};
  }
  auto [ec, r] = direct->exec(redis::detail::acknowledged_request(req, wanted, ack_settings().timeout));
  if (ec == condition::not_sent) return std::nullopt;
  auto out = redis::detail::split_acknowledged(ec, std::move(r), wanted);
  note_replicas(out.reported);
  return std::tuple{out.ec, std::move(out.body), out.acks};
}

// Runs `direct` on a pooled blocking connection; when it could not write
// the command (condition::not_sent: no connection), runs `shared`, which
// waits for the shared connection.
template <class T, class Direct, class Shared>
std::pair<std::error_code, T> RedisBackend::blocking_call(Direct&& direct, Shared&& shared) {
  check_not_io_thread();
  auto c = take_blocking();
  auto [ec, v] = direct(*c);
  give_back(std::move(c));
  if (ec == condition::not_sent) return redis::detail::wait_for<T>(std::forward<Shared>(shared));
  return {ec, std::move(v)};
}

redis::response RedisBackend::exec(redis::request req, std::error_code& ec) {
  auto r = blocking_call<redis::response>([&](redis::blocking_connection& c) { return c.exec(req); },
                                          [&](auto cb) { commands_->async_exec(std::move(req), std::move(cb)); });
  ec = r.first;
  return std::move(r.second);
}

redis::response RedisBackend::exec(redis::request req) {
  return redis::detail::value_or_throw(
      blocking_call<redis::response>([&](redis::blocking_connection& c) { return c.exec(req); },
                                     [&](auto cb) { commands_->async_exec(std::move(req), std::move(cb)); }),
      "Redis request failed");
}

redis::value RedisBackend::command(redis::request req, std::error_code& ec) {
  auto r = blocking_call<redis::value>(
      [&](redis::blocking_connection& c) {
        auto [e, rs] = c.exec(req);
        return redis::detail::single_reply(e, rs);
      },
      [&](auto cb) { async_command(std::move(req), std::move(cb)); });
  ec = r.first;
  return std::move(r.second);
}

redis::value RedisBackend::command(redis::request req) {
  std::error_code ec;
  auto v = command(std::move(req), ec);
  if (ec) redis::detail::value_or_throw(std::pair{ec, std::move(v)}, "Redis command failed");
  return v;
}

redis::value RedisBackend::eval(const redis::script& s, std::vector<std::string> keys,
                                std::vector<std::string> args, std::error_code& ec) {
  auto r = blocking_call<redis::value>(
      [&](redis::blocking_connection& c) { return c.eval(s, keys, args); },
      [&](auto cb) { async_eval(s, std::move(keys), std::move(args), std::move(cb)); });
  ec = r.first;
  return std::move(r.second);
}

redis::value RedisBackend::eval(const redis::script& s, std::vector<std::string> keys,
                                std::vector<std::string> args) {
  std::error_code ec;
  auto v = eval(s, std::move(keys), std::move(args), ec);
  if (ec) redis::detail::value_or_throw(std::pair{ec, std::move(v)}, "Redis script failed");
  return v;
}

}  // namespace dlock
