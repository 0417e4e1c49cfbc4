// A second backend, written outside dlock on the backend contract alone:
// locks spread over several independent Redis servers, each key on the
// server its cluster slot picks. docs/writing-a-policy.md walks through it;
// tests/lock/test_combinations_sharded.cpp runs every combination on it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <dlock/dlock.hpp>
#include <dlock/ext.hpp>

namespace dlock::examples {

/// Keys spread over N servers (one RedisBackend each) by their cluster
/// slot, slot % N: the routing of a Redis Cluster of N masters, without
/// its resharding or failover. Like a cluster, it refuses a call whose keys
/// lie in different slots (a CROSSSLOT error reply), so a policy that would
/// fail on a cluster fails here too. It is a toy: what it shows is that a
/// backend writes only where each call goes; the lock, its policies and
/// their engines are unchanged.
class ShardedBackend {
 public:
  using executor_type = boost::asio::any_io_executor;

  /// One RedisBackend per URL, all on this backend's one I/O thread.
  explicit ShardedBackend(const std::vector<std::string>& urls) : shards_(connect(core_, urls)) {}
  /// The services first (they use the servers), then the servers (their
  /// connections stop), then the one thread, and its context with it.
  /// (With a thread per server, a call to one server completed onto
  /// another's context, and each context could go while another thread
  /// still held work on it: a rare SIGSEGV at teardown.)
  ~ShardedBackend() {
    core_.clear_services();
    shards_.clear();
    core_.drain();  // the stopped connections fail what they still hold
    core_.stop();
  }
  ShardedBackend(const ShardedBackend&) = delete;
  ShardedBackend& operator=(const ShardedBackend&) = delete;

  /// The server that holds `key`.
  RedisBackend& shard_for(std::string_view key) const { return *shards_[ext::key_slot(key) % shards_.size()]; }
  std::size_t shards() const noexcept { return shards_.size(); }
  RedisBackend& shard(std::size_t i) const { return *shards_.at(i); }

  // ---- the backend contract ----

  /// Lock operations and every server's connections run on one I/O
  /// thread of this backend's own.
  executor_type get_executor() const noexcept { return core_.get_executor(); }
  const std::string& client_id() const noexcept { return core_.client_id(); }
  bool on_io_thread() const noexcept { return core_.on_io_thread(); }

  template <class CompletionToken>
  auto async_exec(std::string_view key, redis::request req, CompletionToken&& token) {
    return shard_for(key).async_exec(key, std::move(req), std::forward<CompletionToken>(token));
  }

  template <class CompletionToken>
  auto async_eval(const redis::script& s, std::vector<std::string> keys, std::vector<std::string> args,
                  CompletionToken&& token) {
    if (!one_slot(keys)) {
      return boost::asio::async_initiate<CompletionToken, void(redis::error_code, redis::value)>(
          [this](auto handler) {
            auto ex = boost::asio::get_associated_executor(handler, get_executor());
            boost::asio::post(ex, [h = std::move(handler)]() mutable {
              std::move(h)(make_error_code(error::server_error), crossslot());
            });
          },
          token);
    }
    auto& shard = keys.empty() ? *shards_.front() : shard_for(keys.front());
    return shard.async_eval(s, std::move(keys), std::move(args), std::forward<CompletionToken>(token));
  }

  /// Each server runs its share of the calls in one round trip; the results
  /// come back in the calls' order, each with its own error, so a server
  /// that is down costs only the verdicts of its own calls.
  template <class CompletionToken>
  auto async_eval_all(std::vector<redis::script_call> calls, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(std::vector<redis::call_result>)>(
        [this](auto handler, std::vector<redis::script_call> calls) {
          using handler_type = decltype(handler);
          struct gather {
            std::mutex m;
            std::vector<redis::call_result> out;
            std::size_t pending = 0;
            std::optional<handler_type> h;
          };
          auto g = std::make_shared<gather>();
          g->out.resize(calls.size());
          std::vector<std::vector<redis::script_call>> share(shards_.size());
          std::vector<std::vector<std::size_t>> where(shards_.size());
          for (std::size_t i = 0; i < calls.size(); ++i) {
            if (!one_slot(calls[i].keys)) {
              g->out[i].reply = crossslot();
              continue;
            }
            auto s = calls[i].keys.empty() ? 0 : ext::key_slot(calls[i].keys.front()) % shards_.size();
            share[s].push_back(std::move(calls[i]));
            where[s].push_back(i);
          }
          auto ex = boost::asio::get_associated_executor(handler, get_executor());
          g->h.emplace(std::move(handler));
          auto finish = [g, ex] { boost::asio::dispatch(ex, [g] { std::move(*g->h)(std::move(g->out)); }); };
          for (auto& part : share) g->pending += part.empty() ? 0 : 1;
          if (g->pending == 0) {
            boost::asio::post(ex, [g] { std::move(*g->h)(std::move(g->out)); });  // never inline
            return;
          }
          for (std::size_t s = 0; s < shards_.size(); ++s) {
            if (share[s].empty()) continue;
            shards_[s]->async_eval_all(std::move(share[s]), [g, at = std::move(where[s]),
                                                              finish](std::vector<redis::call_result> r) {
              bool last = false;
              {
                std::lock_guard lk(g->m);
                for (std::size_t j = 0; j < at.size() && j < r.size(); ++j) g->out[at[j]] = std::move(r[j]);
                last = --g->pending == 0;
              }
              if (last) finish();
            });
          }
        },
        token, std::move(calls));
  }

  /// On the server of `key`, where that lock's scripts publish.
  template <class CompletionToken>
  auto async_subscribe(std::string_view key, std::string channel, redis::listener l, CompletionToken&& token) {
    return shard_for(key).async_subscribe(key, std::move(channel), std::move(l),
                                          std::forward<CompletionToken>(token));
  }

  /// One of each service (dlock's engines), kept by the shared backend core.
  template <class Service>
  Service& use_service() {
    return core_.use_service<Service>(*this);
  }

 private:
  static bool one_slot(const std::vector<std::string>& keys) {
    for (auto& k : keys)
      if (ext::key_slot(k) != ext::key_slot(keys.front())) return false;
    return true;
  }
  static redis::value crossslot() {
    return redis::value::make_string("CROSSSLOT Keys in request don't hash to the same slot", redis::kind::error);
  }

  // Starts the thread, then a RedisBackend on it per URL.
  static std::vector<std::unique_ptr<RedisBackend>> connect(backend_core& core, const std::vector<std::string>& urls) {
    if (urls.empty()) throw std::system_error(make_error_code(error::invalid_url), "ShardedBackend: no servers");
    core.start_thread();
    std::vector<std::unique_ptr<RedisBackend>> shards;
    for (auto& url : urls) shards.push_back(std::make_unique<RedisBackend>(core.get_executor(), url));
    return shards;
  }

  // The I/O thread and its context, the client id and the services; made
  // first and kept last (see the destructor).
  backend_core core_;
  std::vector<std::unique_ptr<RedisBackend>> shards_;
};

}  // namespace dlock::examples
