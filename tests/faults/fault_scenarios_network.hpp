// The fault suite's scenarios that fault the network between a client and
// its servers (faults 5, 6 and 10 of docs/faults.md): a fault proxy stands
// in front of every server, the lock under test talks through the proxies,
// and a second client (`direct(name)`, of type F::direct_backend_type)
// talks straight to the servers that hold the lock `name`, as a rival that
// the faults do not touch. Each scenario is a template over a proxied
// fixture F (below, and Sentinel's and Cluster's in
// proxied_deployments.hpp) and a lock type L, for one lock of each kind
// (fault_kinds_t); the rival's lock is rival_t<F, L>.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <support/fault_proxy.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios_server.hpp"

namespace dlock::test::faults {

/// One private redis-server; the backend reaches it through a fault proxy.
struct proxied_one_server {
  using backend_type = RedisBackend;
  using direct_backend_type = RedisBackend;
  redis_server server;
  fault_proxy proxy{server.port()};
  RedisBackend backend{proxy.url()};

  std::vector<fault_proxy*> proxies() { return {&proxy}; }
  /// A client of the same server that no proxy stands in front of.
  std::unique_ptr<RedisBackend> direct(const std::string&) const {
    return std::make_unique<RedisBackend>(server.url());
  }
};

/// Three private redis-servers behind a RedlockBackend whose every node is
/// reached through a fault proxy of its own. Each vote waits up to 2 s
/// (scaled): fault 5 must cut the connections while the vote still waits
/// for the replies it holds back, and on a loaded machine the test's
/// looking (a redis-cli per node) takes a while.
struct proxied_redlock {
  using backend_type = RedlockBackend;
  using direct_backend_type = RedlockBackend;
  std::vector<std::unique_ptr<redis_server>> nodes = redlock_servers::three();
  std::vector<std::unique_ptr<fault_proxy>> node_proxies = proxies_for(nodes);
  RedlockBackend backend{patient(url_of(proxy_ports()))};

  std::vector<fault_proxy*> proxies() {
    std::vector<fault_proxy*> out;
    for (auto& p : node_proxies) out.push_back(p.get());
    return out;
  }
  std::unique_ptr<RedlockBackend> direct(const std::string&) const {
    std::vector<std::uint16_t> ports;
    for (auto& n : nodes) ports.push_back(n->port());
    return std::make_unique<RedlockBackend>(patient(url_of(ports)));
  }

 private:
  static redis::redlock_config patient(std::string_view url) {
    auto cfg = loaded_machine_redlock(url);
    cfg.reply_timeout = scaled(std::chrono::milliseconds(2000));
    return cfg;
  }
  static std::vector<std::unique_ptr<fault_proxy>> proxies_for(const std::vector<std::unique_ptr<redis_server>>& nodes) {
    std::vector<std::unique_ptr<fault_proxy>> out;
    for (auto& n : nodes) out.push_back(std::make_unique<fault_proxy>(n->port()));
    return out;
  }
  std::vector<std::uint16_t> proxy_ports() const {
    std::vector<std::uint16_t> out;
    for (auto& p : node_proxies) out.push_back(p->port());
    return out;
  }
  static std::string url_of(const std::vector<std::uint16_t>& ports) {
    std::string out = "redis://";
    for (std::size_t i = 0; i < ports.size(); ++i) out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(ports[i]);
    return out;
  }
};

/// The rival's lock: L's policies on the fixture's direct backend.
template <class F, class L>
using rival_t = Lock<typename F::direct_backend_type, typename L::ownership_type, typename L::renewal_type,
                     typename L::wait_type>;

/// The servers that hold the lock `name`: on a cluster, the master of its
/// slot; elsewhere every server of the fixture.
template <class F>
std::vector<const redis_server*> servers_holding(F& f, const std::string& name) {
  if constexpr (requires { f.cluster; })
    return {&f.cluster.node(f.cluster.master_of_slot(static_cast<std::uint16_t>(detail::key_slot(name))))};
  else return servers_of(f);
}

/// A key's time to live and a digest of its value (SHA-1 of its DUMP).
struct key_state {
  long long pttl = -2;
  std::string digest;
};

/// The keys of the lock `name` (its name appears in theirs) on every server,
/// each "<port> <key>"; not the markers (a release's or an acquire's
/// memory) nor a FIFO waiter's entry, which hold no lock.
template <class F>
std::map<std::string, key_state> lock_keys(F& f, const std::string& name) {
  std::map<std::string, key_state> out;
  for (auto* s : servers_of(f)) {
    std::istringstream lines(s->command({"EVAL", R"lua(#!lua flags=no-writes,allow-cross-slot-keys
local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  if string.find(k, ARGV[1], 1, true) and not string.find(k, '}:release:', 1, true)
     and not string.find(k, '}:acquire:', 1, true) and not string.find(k, '}:queue:', 1, true) then
    out[#out + 1] = k .. ' ' .. redis.call('PTTL', k) .. ' ' .. redis.sha1hex(redis.call('DUMP', k))
  end
end
return out
)lua", "0", name}));
    for (std::string line; std::getline(lines, line);) {
      auto digest_at = line.rfind(' ');
      auto ttl_at = digest_at == std::string::npos ? digest_at : line.rfind(' ', digest_at - 1);
      if (ttl_at == std::string::npos) continue;
      out[std::to_string(s->port()) + " " + line.substr(0, ttl_at)] =
          key_state{std::stoll(line.substr(ttl_at + 1, digest_at - ttl_at - 1)), line.substr(digest_at + 1)};
    }
  }
  return out;
}

/// The latest moment (monotonic_ns) at which the lock's own key (its
/// name: every ownership's first key) can expire on a majority of the
/// servers that hold it: on each, the time its PTTL's answer came back
/// plus that PTTL (the server read it somewhere between the ask and the
/// answer, and a redis-cli per read takes tens of milliseconds on a loaded
/// machine, so only the answer's time bounds the expiry from above), and
/// of those the median (on Redlock the second latest of three: the hold
/// lasts while a majority has it); 0 when no majority has the key.
template <class F>
std::int64_t majority_expiry(F& f, const std::string& name) {
  std::vector<std::int64_t> ends;
  for (auto* s : servers_holding(f, name)) {
    const long long ttl = std::stoll(s->command({"PTTL", name}));
    const auto answered = monotonic_ns();
    ends.push_back(ttl < 0 ? 0 : answered + ttl * 1000000);
  }
  std::sort(ends.rbegin(), ends.rend());
  return ends[ends.size() / 2];
}

/// Whether every server that holds the lock `name` has a key of it.
template <class F>
bool on_every_server_a_key_of(F& f, const std::string& name) {
  auto keys = lock_keys(f, name);
  for (auto* s : servers_holding(f, name)) {
    auto prefix = std::to_string(s->port()) + " ";
    bool found = false;
    for (auto& [k, state] : keys) found = found || k.starts_with(prefix);
    if (!found) return false;
  }
  return true;
}

/// A moment another thread sets once (monotonic_ns; 0 until then).
struct moment {
  std::atomic<std::int64_t> ns{0};
  void set() { ns.store(monotonic_ns()); }
};

/// How many EVALSHA commands the fixture's servers have run (INFO
/// commandstats): the locks' scripts; the tests' own reads use EVAL.
template <class F>
long long scripts_run(F& f) {
  long long n = 0;
  for (auto* s : servers_of(f)) {
    auto info = s->command({"INFO", "commandstats"});
    auto at = info.find("cmdstat_evalsha:calls=");
    if (at != std::string::npos) n += std::stoll(info.substr(at + 22));
  }
  return n;
}

/// Takes and releases a lock named `name` once: the backend connected and
/// the scripts loaded, so that the next command is the one a test means.
template <class L>
void warm_up(typename L::backend_type& backend, const std::string& name, std::chrono::milliseconds lease) {
  auto lock = make_fault_lock<L>(backend, name, lease);
  auto hold = lock->try_acquire_for(scaled(5s));
  REQUIRE(hold);
  hold->release();
}

/// No key is left on the fixture's servers but markers (within 2 s).
template <class F>
void check_no_keys_left(F& f) {
  auto keys = keys_after(f, scaled(2s));
  INFO("keys left:\n" << keys);
  CHECK(keys.empty());
}

/// Fault 5: an acquire whose reply is lost. In half of 4 rounds the proxies
/// hold the servers' replies back until every server has applied the
/// acquire, then cut every connection (the reply is lost after the write);
/// in the others they hold the request back and cut (it never arrived).
/// Each time the lock must come back as held, found by asking the servers
/// (resolve) or taken by the wait's next try, and be a real hold: a rival
/// straight to the servers cannot take it, the watchdog keeps it past its
/// lease, its release succeeds and the rival then takes it at once. At the
/// end no key is left but markers.
template <class F, class L>
void lost_replies_scenario() {
  F redis;
  const auto lease = scaled(1200ms);
  const std::string base = "lost-reply:" + L::combination_name();
  warm_up<L>(redis.backend, base + ":warm", lease);
  int after_apply = 0, before_apply = 0;
  std::int64_t longest_ns = 0;
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    const bool applied = round % 2 == 0;
    const std::string name = base + ":" + std::to_string(round);
    auto lock = make_fault_lock<L>(redis.backend, name, lease);
    // The acquiring thread first takes a lock in the same cluster slot
    // ("{name}", whose markers lock_keys leaves out), so that the
    // connections it will use are open (a blocking caller's own, the slot's
    // node's): a connect held back in a proxy would keep the acquire from
    // being sent at all.
    std::promise<bool> warmed;
    std::promise<void> go;
    auto outcome = std::async(std::launch::async, [&, start = go.get_future()] {
      auto warm = make_fault_lock<L>(redis.backend, "{" + name + "}", lease);
      auto warm_hold = warm->try_acquire_for(scaled(5s));
      if (warm_hold) warm_hold->release();
      warmed.set_value(warm_hold.has_value());
      start.wait();
      std::error_code ec;
      auto hold = lock->try_acquire_for(scaled(5s), ec);
      return std::pair{ec, std::move(hold)};
    });
    const bool warm = warmed.get_future().get();
    if (!warm) go.set_value();  // the thread goes on (and ends), the test ends here
    REQUIRE(warm);
    for (auto* p : redis.proxies())
      p->stall(applied ? fault_proxy::direction::to_client : fault_proxy::direction::to_server);
    const auto asked_at = monotonic_ns();
    go.set_value();
    // Cut at once: the vote (Redlock) waits a limited time for the replies.
    if (applied) CHECK(wait_until([&] { return on_every_server_a_key_of(redis, name); }, scaled(3s)));
    else std::this_thread::sleep_for(scaled(100ms));  // the request waits in the proxy
    for (auto* p : redis.proxies()) p->cut();
    if (!applied) CHECK(lock_keys(redis, name).empty());
    for (auto* p : redis.proxies()) p->resume();
    auto [ec, hold] = outcome.get();
    INFO("the acquire: " << ec.message());
    REQUIRE(hold);
    if (applied) longest_ns = std::max(longest_ns, monotonic_ns() - asked_at);
    (applied ? after_apply : before_apply) += 1;
    auto direct = redis.direct(name);
    auto rival = make_fault_lock<rival_t<F, L>>(*direct, name, lease);
    std::error_code rival_ec;
    CHECK_FALSE(rival->try_acquire_for(std::chrono::milliseconds(0), rival_ec));
    CHECK(rival_ec == error::not_acquired);
    std::this_thread::sleep_for(lease + scaled(200ms));  // the watchdog keeps it past its first lease
    CHECK_FALSE(hold->lost());
    CHECK_FALSE(rival->try_acquire_for(std::chrono::milliseconds(0)));
    hold->release(ec);
    INFO("the release: " << ec.message());
    CHECK_FALSE(ec);
    auto taken = rival->try_acquire_for(scaled(1s), rival_ec);
    INFO("the rival after the release: " << rival_ec.message());
    REQUIRE(taken);
    taken->release();
  }
  WARN(L::combination_name() << ": 4 acquires whose connection was cut, " << after_apply
                             << " after the servers applied them (found by resolve, the longest in "
                             << longest_ns / 1000000 << " ms), " << before_apply
                             << " before (taken by the next try); each held, renewed and released");
  check_no_keys_left(redis);
}

/// Fault 5 for an ownership that cannot resolve a lost reply (its value
/// does not tell this try from another's): the acquire applied, its reply
/// lost, must end outcome_unknown, never not_acquired, and the lock it may
/// have taken must be free for a rival within its lease.
template <class F, class L>
void unresolvable_reply_scenario() {
  F redis;
  const auto lease = scaled(1000ms);
  const std::string name = "lost-reply:" + L::combination_name();
  auto direct = redis.direct(name);
  auto lock = make_fault_lock<L>(redis.backend, name, lease);
  warm_up<L>(redis.backend, name + ":warm", lease);
  for (auto* p : redis.proxies()) p->stall(fault_proxy::direction::to_client);
  const auto asked_at = monotonic_ns();
  auto outcome = std::async(std::launch::async, [&] {
    std::error_code ec;
    auto hold = lock->try_acquire_for(scaled(5s), ec);
    return std::pair{ec, hold.has_value()};
  });
  CHECK(wait_until([&] { return on_every_server_a_key_of(redis, name); }, scaled(3s)));
  for (auto* p : redis.proxies()) p->cut();
  for (auto* p : redis.proxies()) p->resume();
  auto [ec, held] = outcome.get();
  CHECK_FALSE(held);
  CHECK(ec == error::outcome_unknown);
  // The lock it may have taken lapses with its lease: a rival takes it
  // within the lease (and some slack), not before the lease of the write
  // (sent after `asked_at`) can have run out.
  auto rival = make_fault_lock<rival_t<F, L>>(*direct, name, lease);
  auto taken = rival->try_acquire_for(lease + scaled(2s));
  const auto taken_at = monotonic_ns();
  REQUIRE(taken);
  CHECK(taken_at >= asked_at + std::chrono::nanoseconds(lease).count());
  WARN(L::combination_name() << ": a lost acquire reply, outcome_unknown; a rival took the lock "
                             << (taken_at - asked_at) / 1000000 << " ms after it was asked for (lease "
                             << lease.count() << " ms)");
  taken->release();
}

/// Fault 6: the servers unreachable for longer than the lease while the
/// watchdog holds. In 3 rounds (the proxies stalled at a different point of
/// the renewal period each time) a hold through the proxies loses every
/// renewal; a rival straight to the servers (its lease 30 s) takes the lock
/// once the lease is over. The hold's end (its remaining_lease(), watched
/// until it is lost) came before the rival's acquire, and the loss signal
/// was given (its lead is reported: on a loaded machine the callback waits
/// for its thread to be scheduled); the proxies then deliver what they
/// held, the holder's late renewals among them (scripts ran), and none of
/// it touches the rival's keys: each keeps its value and at least the time
/// to live it had, less the time between the reads. The holder's release
/// is lease_lost; the rival's succeeds; nothing overlaps.
template <class F, class L>
void unreachable_scenario() {
  F redis;
  const auto lease = scaled(1000ms);
  hold_history history;
  long long signal_lead_ms = 1'000'000;  // the least time between a loss signal and the rival's acquire
  long long fewest_late = 1'000'000;     // the fewest scripts the proxies delivered late in a round
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const std::string name = "unreachable:" + L::combination_name() + ":" + std::to_string(round);
    auto lock = make_fault_lock<L>(redis.backend, name, lease);
    std::error_code ec;
    auto hold = lock->try_acquire_for(scaled(5s), ec);
    INFO("the acquire: " << ec.message());
    REQUIRE(hold);
    hold_span held{name, "holder", monotonic_ns(), 0, false};
    auto lost_at = std::make_shared<moment>();  // the callback may outlive this round if it fails
    hold->on_lost([lost_at] { lost_at->set(); });
    // The hold's own idea of its end, watched from before the stall until
    // it is lost (a renewal confirmed just before the stall moves it).
    std::atomic<bool> watching{true};
    std::atomic<std::int64_t> believed_end{0};
    std::thread watcher([&] {
      while (watching.load() && !hold->lost()) {
        auto left = std::chrono::nanoseconds(hold->remaining_lease()).count();
        believed_end = std::max(believed_end.load(), monotonic_ns() + left);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    std::this_thread::sleep_for(lease / 9 * round);
    const auto stalled_at = monotonic_ns();
    for (auto* p : redis.proxies()) p->stall();
    auto direct = redis.direct(name);
    auto rival_lock = make_fault_lock<rival_t<F, L>>(*direct, name, scaled(30s));
    auto rival = rival_lock->try_acquire_for(lease * 6, ec);
    const auto taken_at = monotonic_ns();
    watching = false;
    watcher.join();
    INFO("the rival: " << ec.message());
    REQUIRE(rival);
    // The hold ended (for its holder) before the rival's acquire; the loss
    // callback runs on the backend's thread at that moment, as soon as the
    // thread is scheduled.
    wait_until([&] { return lost_at->ns.load() != 0; }, scaled(2s));
    INFO("held at 0 ms, the proxies stalled at " << (stalled_at - held.start_ns) / 1000000
         << " ms, the hold's end at " << (believed_end.load() - held.start_ns) / 1000000 << " ms, the rival took it at "
         << (taken_at - held.start_ns) / 1000000 << " ms, the loss signal at "
         << (lost_at->ns.load() - held.start_ns) / 1000000 << " ms");
    CHECK(believed_end.load() < taken_at);
    REQUIRE(lost_at->ns.load() != 0);
    signal_lead_ms = std::min<long long>(signal_lead_ms, (taken_at - lost_at->ns.load()) / 1000000);
    CHECK(hold->lost());
    CHECK(hold->remaining_lease() == std::chrono::milliseconds(0));
    held.end_ns = believed_end.load();  // where the hold ended for its holder
    history.add(held);
    // The rival's keys (a 30 s time to live) before and after the proxies
    // deliver what they held: the same value, and the time to live they
    // had less the time between the reads (a stray renewal would have set
    // the holder's 1 s).
    const auto scripts_before = scripts_run(redis);
    const auto before_sent = monotonic_ns();
    auto before = lock_keys(redis, name);
    for (auto* p : redis.proxies()) p->resume();
    std::this_thread::sleep_for(scaled(300ms));
    auto after = lock_keys(redis, name);
    const auto after_read = monotonic_ns();
    const long long late_scripts = scripts_run(redis) - scripts_before;
    const long long between_ms = (after_read - before_sent) / 1000000 + 1;
    int checked = 0;
    for (auto& [key, was] : before) {
      if (was.pttl < 3 * lease.count()) continue;  // not the rival's
      ++checked;
      INFO(key << ": " << was.pttl << " ms to live before, " << (after.count(key) ? after[key].pttl : -2)
               << " after (" << between_ms << " ms between the reads)");
      REQUIRE(after.count(key));
      CHECK(after[key].pttl >= was.pttl - between_ms);
      CHECK(after[key].digest == was.digest);
    }
    CHECK(checked > 0);
    // What the proxies held reached the servers: the holder's renewals
    // (at least one was due during the stall) ran, and changed nothing.
    CHECK(late_scripts > 0);
    fewest_late = std::min(fewest_late, late_scripts);
    hold->release(ec);
    CHECK(ec == error::lease_lost);
    rival->release(ec);
    INFO("the rival's release: " << ec.message());
    CHECK_FALSE(ec);
    history.add(hold_span{name, "rival", taken_at, monotonic_ns(), false});
  }
  WARN(L::combination_name() << ": 3 holds cut off past their lease, each ended before a rival took the lock; "
                             << "the loss signal's smallest lead over the rival: " << signal_lead_ms
                             << " ms; " << fewest_late << " or more late scripts a round, none touched the rival's keys");
  auto overlaps = history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
  check_no_keys_left(redis);
}

/// Fault 10: latency and jitter. Every proxy delays each chunk 20 ms plus a
/// random 0 to 30 ms, each way (a round trip of 40 to 100 ms). For 4 s two
/// threads take and release 2 locks through the proxies and one straight
/// to the servers (1.2 s leases, renewed every 400 ms); the first hold of
/// each proxied thread lasts 3 s, past two leases. Checked: no error, no
/// overlap, no hold lost (the watchdog keeps up with the latency); each
/// proxied hold's own idea of its lease ends no later than the servers'
/// (the lock key's PTTL, a majority's on Redlock, read straight after it
/// was taken: the lease counts from the send, not the reply); and a wait
/// that cannot win ends not_acquired, no sooner than asked.
template <class F, class L>
void latency_scenario() {
  F redis;
  const auto lease = scaled(1200ms);
  const auto length = scaled(4s);
  for (auto* p : redis.proxies()) {
    p->delay(scaled(20ms));
    p->jitter(scaled(30ms));
  }
  const std::string base = "latency:" + L::combination_name();
  hold_history history;
  std::mutex m;
  std::vector<std::string> failures;
  std::atomic<long long> holds{0}, long_holds{0}, lease_checks{0};
  // Thread t takes and releases `locks` (the 2 locks, through the proxies
  // or straight to the servers) until `length` has passed.
  auto churn = [&]<class Locks>(int t, const Locks& locks) {
    const bool proxied = t < 2;
    std::mt19937 rng(static_cast<unsigned>(t));
    std::vector<hold_span> mine;
    std::vector<std::string> failed;
    const auto end = std::chrono::steady_clock::now() + length;
    for (bool first = true; std::chrono::steady_clock::now() < end && failed.empty(); first = false) {
      auto& lock = *locks[rng() % 2];
      std::error_code ec;
      auto hold = lock.try_acquire_for(scaled(10s), ec);
      if (!hold) {
        failed.push_back("acquire: " + ec.message());
        break;
      }
      hold_span span{lock.name(), "t" + std::to_string(t), monotonic_ns(), 0, false};
      if (proxied) {
        // The hold's own idea of when its lease ends, against the latest
        // moment the servers' key can end (majority_expiry).
        const auto believed = monotonic_ns() + std::chrono::nanoseconds(hold->remaining_lease()).count();
        const auto sent = monotonic_ns();
        const auto expires = majority_expiry(redis, lock.name());
        if (expires > 0) {
          ++lease_checks;
          if (believed > expires + 1000000)  // a PTTL's whole milliseconds
            failed.push_back("a hold believes its lease ends " + std::to_string((believed - sent) / 1000000) +
                             " ms on, the servers' key " + std::to_string((expires - sent) / 1000000) + " ms");
        }
      }
      const bool long_one = proxied && first;
      std::this_thread::sleep_for(long_one ? scaled(3s) : std::chrono::milliseconds(rng() % 20));
      if (hold->lost()) failed.push_back("a hold was lost (the watchdog fell behind the latency)");
      span.end_ns = monotonic_ns();
      mine.push_back(span);
      hold->release(ec);
      if (ec) failed.push_back("release: " + ec.message());
      ++holds;
      long_holds += long_one;
    }
    std::lock_guard g(m);
    for (auto& s : mine) history.add(s);
    failures.insert(failures.end(), failed.begin(), failed.end());
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < 2; ++t) {
    pool.emplace_back([&, t] {
      std::vector<std::unique_ptr<L>> locks;
      for (int i = 0; i < 2; ++i)
        locks.push_back(make_fault_lock<L>(redis.backend, base + "." + std::to_string(i), lease));
      churn(t, locks);
    });
  }
  pool.emplace_back([&] {
    std::vector<std::unique_ptr<typename F::direct_backend_type>> direct;  // one per lock (a cluster's own node)
    std::vector<std::unique_ptr<rival_t<F, L>>> locks;
    for (int i = 0; i < 2; ++i) {
      const auto name = base + "." + std::to_string(i);
      direct.push_back(redis.direct(name));
      locks.push_back(make_fault_lock<rival_t<F, L>>(*direct.back(), name, lease));
    }
    churn(2, locks);
  });
  for (auto& t : pool) t.join();
  std::string all;
  for (auto& f : failures) all += f + "\n";
  INFO(all);
  CHECK(failures.empty());
  CHECK(long_holds.load() == 2);
  CHECK(lease_checks.load() > 0);
  auto overlaps = history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
  // A wait that cannot win: the rival holds; the wait through the proxies
  // ends not_acquired, no sooner than asked.
  auto direct = redis.direct(base + ".0");
  auto rival = make_fault_lock<rival_t<F, L>>(*direct, base + ".0", lease);
  auto held = rival->try_acquire_for(scaled(5s));
  REQUIRE(held);
  auto waiter = make_fault_lock<L>(redis.backend, base + ".0", lease);
  const auto asked = std::chrono::steady_clock::now();
  std::error_code ec;
  CHECK_FALSE(waiter->try_acquire_for(scaled(300ms), ec));
  const auto waited = std::chrono::steady_clock::now() - asked;
  CHECK(ec == error::not_acquired);
  CHECK(waited >= scaled(300ms));
  held->release();
  WARN(L::combination_name() << ": " << holds.load() << " holds over 40-100 ms round trips, " << lease_checks.load()
                             << " leases checked against the servers', the 2 long holds renewed; a 300 ms wait "
                             << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms");
  for (auto* p : redis.proxies()) {
    p->delay(std::chrono::milliseconds(0));
    p->jitter(std::chrono::milliseconds(0));
  }
  check_no_keys_left(redis);
}

}  // namespace dlock::test::faults

// Faults 5, 6 and 10 for one lock of each kind on the proxied fixture FIXTURE.
#define NETWORK_FAULT_SCENARIOS(FIXTURE, BACKEND, TAG)                                                           \
  TEMPLATE_LIST_TEST_CASE("fault 5: a lost acquire reply is resolved and the lock is really held",               \
                          "[faults][" TAG "]", dlock::test::faults::fault_kinds_t<BACKEND>) {                   \
    dlock::test::faults::lost_replies_scenario<FIXTURE, TestType>();                                            \
  }                                                                                                            \
  TEMPLATE_LIST_TEST_CASE("fault 6: unreachable past the lease, the loss comes first and no renewal strays",     \
                          "[faults][" TAG "]", dlock::test::faults::fault_kinds_t<BACKEND>) {                   \
    dlock::test::faults::unreachable_scenario<FIXTURE, TestType>();                                             \
  }                                                                                                            \
  TEMPLATE_LIST_TEST_CASE("fault 10: under latency and jitter leases and waits hold to their word",              \
                          "[faults][" TAG "]", dlock::test::faults::fault_kinds_t<BACKEND>) {                   \
    dlock::test::faults::latency_scenario<FIXTURE, TestType>();                                                 \
  }
