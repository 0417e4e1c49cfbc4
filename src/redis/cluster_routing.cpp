// ClusterBackend's routing: each call to the master of its slot, and the
// redirections (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) and lost connections it
// follows.
#include "cluster_router.hpp"

namespace dlock::redis::detail {

namespace {

asio::awaitable<void> pause(const asio::any_io_executor& ex, std::chrono::milliseconds d) {
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

// One routed request: to the master of its slot, following redirections.
asio::awaitable<std::tuple<error_code, response, replica_acks>> routed(std::shared_ptr<cluster_router> r,
                                                                      std::uint16_t slot, request req,
                                                                      bool acknowledged) {
  const auto& cfg = r->settings();
  const auto retry_budget = std::min(cfg.retry_for, cfg.node.command_timeout);
  auto give_up_at = cluster_clock::now() + retry_budget;
  bool budget_renewed = false;
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
          if (cluster_clock::now() >= give_up_at)
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
    const auto sent_at = cluster_clock::now();
    if (acknowledged) {
      std::tie(ec, resp, acks) =
          co_await target->backend->async_exec_acknowledged(std::string_view(), std::move(to_send), use_tuple);
    } else {
      std::tie(ec, resp) = co_await target->backend->async_exec(std::move(to_send), use_tuple);
    }
    // A send that took longer than the whole budget waited in a connection's
    // queue (a master that died, before the cluster noticed): what it meets
    // now (a replica, a CLUSTERDOWN of a master just restarted) is news, not
    // a retry. It gets the budget once more, from now; once per command.
    if (!budget_renewed && cluster_clock::now() - sent_at >= retry_budget) {
      budget_renewed = true;
      give_up_at = std::max(give_up_at, cluster_clock::now() + retry_budget);
    }
    if (ec) {
      if (is_connection_error(ec)) r->refresh_soon();
      // Never written: where the map says next, once it was read again.
      const bool in_time = cluster_clock::now() < give_up_at;
      if (ec == error::not_master) {
        // A replica where the map names a master (ROLE said so before
        // anything was sent): the map is behind a failover. Like a MOVED
        // reply, a fresh map that names another node is followed (within
        // max_redirects) even once retry_for is over: the command may have
        // waited its turn in the queue of a master that died and came back
        // as a replica while the cluster promoted another. When the read
        // still names it, either the node has not heard yet, or it was
        // promoted back (a failback) while its connection, having found a
        // replica, refuses until its next connect, up to a reconnect backoff
        // away: that connection is told to connect now (a wake, not a new
        // connection; one already connecting is left alone; see
        // cluster_router::wake), and the next try comes after a pause.
        const auto refused = target;
        co_await async_map_ready(r, true, use_tuple);
        const auto now_there = r->owner(slot);
        if (now_there != refused && (in_time || (now_there && ++redirects <= cfg.max_redirects))) {
          target = nullptr;
          asking = false;
          continue;
        }
        if (in_time) {  // the map still names it
          r->wake(*refused);
          co_await pause(ex, cfg.retry_pause);
          target = nullptr;
          asking = false;
          continue;
        }
      } else if (ec == condition::not_sent && ec != error::shutting_down && in_time) {
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
        if (cluster_clock::now() >= give_up_at) break;
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
  r->channels().subscribe(std::move(channel), std::move(l), std::move(done));
}

std::string cross_slot_message(const std::vector<std::string>& keys) {
  std::string out = "the keys lie in different cluster slots:";
  for (auto& k : keys) out += " \"" + k + "\" (slot " + std::to_string(key_slot(k)) + ")";
  return out;
}

}  // namespace dlock::redis::detail
