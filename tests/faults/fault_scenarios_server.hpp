// The fault suite's scenarios that disturb the servers or the waits, not
// the network (faults 7, 8 and 9 of docs/faults.md), each a template over a
// backend fixture F (tests/lock/backend_fixtures.hpp) and a lock type L, as
// in fault_scenarios.hpp. They run on every backend, with one lock of each
// kind (fault_kinds_t below).
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <boost/hana.hpp>

#include <dlock/combinations.hpp>
#include <dlock/detail/renewal_service.hpp>

#include "fault_scenarios.hpp"

namespace dlock::test::faults {

namespace hana = boost::hana;

/// How long a FIFO line's grant channel outlives its last waiter here.
inline const std::chrono::milliseconds linger = scaled(200ms);

/// A lock of each kind with the watchdog, with the wait that suits it: the
/// token lock (Spin), the reentrant hash (PubSub), the FIFO line (HandOff),
/// a one-permit semaphore and a read-write lock's write side (PubSub);
/// those that `B` allows (on a quorum: the token lock and the hash).
template <class O, class R, class W>
struct kind {
  using ownership = O;
  using renewal = R;
  using wait = W;
};

template <class B>
constexpr auto fault_kinds() {
  auto all = hana::tuple_t<kind<ownership::Token, renewal::Watchdog, wait::Spin>,
                           kind<ownership::ReentrantHash, renewal::Watchdog, wait::PubSub>,
                           kind<ownership::Queue, renewal::Watchdog, wait::HandOff>,
                           kind<ownership::Semaphore, renewal::Watchdog, wait::PubSub>,
                           kind<ownership::ReadWrite, renewal::Watchdog, wait::PubSub>>;
  auto valid = hana::filter(all, [](auto k) {
    using K = typename decltype(k)::type;
    return hana::bool_c<valid_on<B, typename K::ownership, typename K::renewal, typename K::wait>>;
  });
  return hana::transform(valid, [](auto k) {
    using K = typename decltype(k)::type;
    return hana::type_c<Lock<B, typename K::ownership, typename K::renewal, typename K::wait>>;
  });
}
template <class B>
using fault_kinds_t = combinations::detail::as_tuple_type<decltype(fault_kinds<B>())>;

/// Those of fault_kinds whose waiters are woken by a message (PubSub,
/// HandOff): all but the token lock's Spin.
template <class B>
constexpr auto woken_kinds() {
  return hana::filter(fault_kinds<B>(), [](auto t) {
    using L = typename decltype(t)::type;
    return hana::bool_c<!std::is_same_v<typename L::wait_type, wait::Spin>>;
  });
}
template <class B>
using woken_kinds_t = combinations::detail::as_tuple_type<decltype(woken_kinds<B>())>;

/// The servers a fixture's locks live on, where a command must reach them
/// all: the one server, Sentinel's master, a cluster's masters, every
/// Redlock node.
template <class F>
std::vector<const redis_server*> servers_of(F& f) {
  std::vector<const redis_server*> out;
  if constexpr (requires { f.server; }) out.push_back(&f.server);
  else if constexpr (requires { f.deployment; }) out.push_back(&f.deployment.master());
  else if constexpr (requires { f.cluster; }) {
    for (auto m : f.cluster.masters()) out.push_back(&f.cluster.node(m));
  } else {
    for (auto& n : f.nodes) out.push_back(n.get());
  }
  return out;
}

template <class F>
void on_every_server(F& f, const std::vector<std::string>& args) {
  for (auto* s : servers_of(f)) s->command(args);
}

/// Kills every client connection of `type` (CLIENT KILL TYPE) on the
/// fixture's servers but the sentinels' own links ("sentinel-..." by name):
/// a sentinel reconnects a link at most once a second, so killing its
/// pub/sub link and then its command link can keep it from the master past
/// a test deployment's 1 s down-after, and it fails over.
template <class F>
void kill_clients(F& f, const std::string& type) {
  for (auto* s : servers_of(f)) {
    std::istringstream lines(s->command({"CLIENT", "LIST", "TYPE", type}));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string id, name;
      for (std::string field; fields >> field;) {
        if (field.starts_with("id=")) id = field.substr(3);
        else if (field.starts_with("name=")) name = field.substr(5);
      }
      if (!id.empty() && !name.starts_with("sentinel-")) s->command({"CLIENT", "KILL", "ID", id});
    }
  }
}

/// The channels that have subscribers on the fixture's servers, plain and
/// sharded (Sentinel's own hello channel aside), one "<port> <channel>" a line.
template <class F>
std::string channels_left(F& f) {
  std::string out;
  for (auto* s : servers_of(f)) {
    for (const char* kind : {"CHANNELS", "SHARDCHANNELS"}) {
      std::istringstream lines(s->command({"PUBSUB", kind}));
      for (std::string line; std::getline(lines, line);)
        if (!line.empty() && line != "__sentinel__:hello") out += std::to_string(s->port()) + " " + line + "\n";
    }
  }
  return out;
}

/// The channels the fixture's backend has subscribed to now (its own table).
template <class F>
std::size_t own_channels(F& f) {
  if constexpr (requires { f.backend.subscriber().channel_count(); }) return f.backend.subscriber().channel_count();
  else if constexpr (requires { f.backend.channel_count(); }) return f.backend.channel_count();
  else {
    std::size_t n = 0;
    for (std::size_t i = 0; i < f.backend.node_count(); ++i) n += f.backend.node(i).subscriber().channel_count();
    return n;
  }
}

/// Whether `key`, whose time to live is `pttl` ms, is a marker that holds
/// no lock and expires within 10 s (the defaults): a release script's
/// memory of its result, a read-write acquire's, a FIFO waiter's entry
/// after it left the line (`entry` "x"), or the entry of a waiter that was
/// granted the lock, which has no place in the line (`entry` "void": it
/// can never be granted again) and lapses within the entry's 3 s. A PTTL
/// of 0 is a key that lapsed while keys_left's script ran: a script reads
/// keys at the time it started, but PTTL counts from the clock's present
/// and says 0 for a time gone by (a long read, of thousands of markers,
/// met that several times in a loaded run).
inline bool memory_marker(const std::string& key, long long pttl, const std::string& entry) {
  if (pttl < 0 || pttl > 10000) return false;
  if (key.find("}:release:") != std::string::npos || key.find("}:acquire:") != std::string::npos) return true;
  return entry == "x" || (entry == "void" && pttl <= 3000);
}

/// The keys on the fixture's servers, "<key> <PTTL>" a line (-1: no
/// expiry), without the markers above unless `markers`. One script per
/// server reads them all (after a churn, release memory holds thousands):
/// each key's PTTL, and for a FIFO waiter's entry, "x" (it left), "void"
/// (no place in the line) or "placed".
template <class F>
std::string keys_left(F& f, bool markers = false) {
  static const std::string script = R"lua(#!lua flags=no-writes,allow-cross-slot-keys
local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  local line = k .. ' ' .. redis.call('PTTL', k)
  local at = string.find(k, '}:queue:', 1, true)
  if at then
    local entry = redis.call('GET', k)
    if entry ~= 'x' then
      local token, placed = string.sub(k, at + 8), false
      for _, place in ipairs(redis.call('LRANGE', string.sub(k, 1, at + 6), 0, -1)) do
        if string.sub(place, 1, #token + 1) == token .. ':' then placed = true end
      end
      entry = placed and 'placed' or 'void'
    end
    line = line .. ' ' .. entry
  end
  out[#out + 1] = line
end
return out
)lua";
  std::string out;
  for (auto* s : servers_of(f)) {
    std::istringstream lines(s->command({"EVAL", script, "0"}));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string key, entry;
      long long pttl = 0;
      if (!(words >> key >> pttl)) continue;
      words >> entry;
      if (markers || !memory_marker(key, pttl, entry)) out += line + "\n";
    }
  }
  return out;
}

/// A lock as make_lock makes it, but a FIFO line's grant channel lingers
/// 200 ms after its last waiter (not 10 s), so that a test can see it go.
template <class L>
std::unique_ptr<L> make_fault_lock(typename L::backend_type& backend, std::string name,
                                   std::chrono::milliseconds lease) {
  using W = typename L::wait_type;
  if constexpr (std::is_same_v<W, wait::HandOff>)
    return std::make_unique<L>(backend, std::move(name), typename L::ownership_type{}, test_renewal<L>(lease),
                               W{W{}.entry_ttl, linger});
  else return make_lock<L>(backend, std::move(name), lease);
}

/// The keys left without an expiry, one a line.
template <class F>
std::string keys_without_expiry(F& f) {
  std::string out;
  std::istringstream lines(keys_left(f));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);  // "<key> <PTTL>", and a FIFO entry's state after
    std::string key;
    long long pttl = 0;
    if (words >> key >> pttl && pttl == -1) out += key + "\n";
  }
  return out;
}

/// Polls until the fixture's servers hold no key but release memory's
/// markers (for up to `limit`); what is left, "" when nothing.
template <class F>
std::string keys_after(F& f, std::chrono::milliseconds limit) {
  std::string left;
  wait_until([&] { return (left = keys_left(f)).empty(); }, limit);
  return left;
}

/// Removes from `errors` (a churn log's error lines) those of `code`;
/// returns how many there were.
inline long long take_out(std::vector<std::string>& errors, error code) {
  const std::string word = " " + error_code_word(make_error_code(code)) + " ";
  const auto before = errors.size();
  std::erase_if(errors, [&](const std::string& e) { return e.find(word) != std::string::npos; });
  return static_cast<long long>(before - errors.size());
}

/// Fault 7: while 3 processes churn, every server of the deployment is
/// disturbed in turn: its script cache flushed, every client paused for
/// 300 ms, every write refused as out of memory for 300 ms (maxmemory 1),
/// the subscriber connections killed, every client connection killed (but
/// the sentinels': see kill_clients). The errors are the documented ones,
/// every worker ends (no waiter is stuck), the locks are taken again after
/// the last disturbance, nothing overlaps and no key is left without an
/// expiry.
template <class F, class L>
void disturbed_servers_scenario() {
  F redis;
  log_folder logs;
  // The disturbances take the first 1.8 s; the rest, more than a lease, is
  // for the locks to be taken again.
  churn_plan plan{.prefix = "disturbed:" + L::combination_name(), .locks = 2, .lease = scaled(2s),
                  .length = scaled(4500ms), .log = {}};
  churn_crowd crowd(logs, redis.worker_spec(), L::combination_name(), plan, 3);
  REQUIRE(crowd.started() == 3);
  const std::string pause = std::to_string(scaled(300ms).count());
  const std::vector<std::pair<std::string, std::function<void()>>> disturbances = {
      {"SCRIPT FLUSH", [&] { on_every_server(redis, {"SCRIPT", "FLUSH"}); }},
      {"CLIENT PAUSE", [&] { on_every_server(redis, {"CLIENT", "PAUSE", pause, "ALL"}); }},
      {"maxmemory 1",
       [&] {
         on_every_server(redis, {"CONFIG", "SET", "maxmemory", "1"});
         std::this_thread::sleep_for(scaled(300ms));
         on_every_server(redis, {"CONFIG", "SET", "maxmemory", "0"});
       }},
      {"CLIENT KILL TYPE pubsub", [&] { kill_clients(redis, "pubsub"); }},
      {"CLIENT KILL TYPE normal", [&] { kill_clients(redis, "normal"); }},
  };
  for (auto& [what, disturb] : disturbances) {
    std::this_thread::sleep_for(scaled(300ms));
    INFO(what);
    disturb();
  }
  const auto last = monotonic_ns();
  CHECK(crowd.finish(plan.length + scaled(20s)) == 3);  // none stuck
  auto log = crowd.log();
  long long after = 0;
  for (auto& s : log.history.spans()) after += s.start_ns > last;
  WARN(L::combination_name() << ": " << log.holds << " holds through 5 disturbances, " << after
                             << " after the last; " << log.expected.size() << " outcome_unknown or not acknowledged; "
                             << log.errors.size() << " other errors");
  // Refused writes reach the caller as server_error (the OOM reply's
  // words go to the lock's error text); nothing else may go wrong.
  // On a quorum, a node that refused a write (out of memory) or lost it
  // with its connection can leave a hold on fewer nodes than its release
  // needs to confirm it was still held: that release says lease_lost, the
  // safe answer (docs/faults.md); the checker still sees every hold.
  constexpr bool quorum = requires { redis.nodes; };
  std::vector<std::string> other = log.errors;
  take_out(other, error::server_error);
  const long long unconfirmed = quorum ? take_out(other, error::lease_lost) : 0;
  if (unconfirmed > 0) WARN(unconfirmed << " releases a quorum could not confirm reported lease_lost");
  std::string all;
  for (auto& e : other) all += e + "\n";
  for (auto& e : log.expected) all += e + "\n";
  INFO(other.size() << " unexpected errors; the errors, each worker's in order:\n" << all);
  CHECK(other.empty());
  CHECK(log.done == 3);
  CHECK(log.open.empty());
  CHECK(after > 0);  // it recovered
  auto overlaps = log.history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
  auto bare = keys_without_expiry(redis);
  INFO("keys without an expiry:\n" << bare);
  CHECK(bare.empty());
}

/// Fault 8 (the kinds whose waiters a message wakes): 4 threads of one
/// process take and release 2 locks as fast as they can, 5,000 times in
/// all, each acquire a wait of up to 10 s for a 20 s lease: a
/// release that races a waiter's subscription must still wake it (a lost
/// wake-up leaves a waiter asleep until the 10 s try ends). Afterwards no
/// subscription is left, on the servers (PUBSUB CHANNELS, SHARDCHANNELS)
/// or in the backend's own table, and no key.
template <class F, class L>
void wake_up_scenario() {
  F redis;
  constexpr int threads = 4;
  constexpr int names = 2;
  constexpr int waits = 5000;
  const auto lease = scaled(20s);
  std::mutex m;
  hold_history history;
  std::vector<std::string> failures;
  std::atomic<long long> longest_us{0};
  std::atomic<int> slow{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<std::unique_ptr<L>> locks;
      for (int i = 0; i < names; ++i)
        locks.push_back(
            make_fault_lock<L>(redis.backend, "wakes:" + L::combination_name() + "." + std::to_string(i), lease));
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<hold_span> mine;
      std::vector<std::string> failed;
      for (int i = 0; i < waits / threads && failed.empty(); ++i) {
        auto& lock = *locks[rng() % names];
        const auto asked = std::chrono::steady_clock::now();
        std::error_code ec;
        auto hold = lock.try_acquire_for(scaled(10s), ec);
        const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - asked);
        for (auto was = longest_us.load(); waited.count() > was && !longest_us.compare_exchange_weak(was, waited.count());) {
        }
        if (!hold && (ec == error::not_acknowledged || ec == error::outcome_unknown)) {
          ++slow;  // a loaded machine: the replicas' WAIT or a reply later than its timeout
          --i;
          continue;
        }
        if (!hold) {
          failed.push_back("acquire: " + ec.message());
          break;
        }
        hold_span span{lock.name(), "t" + std::to_string(t), monotonic_ns(), 0, false};
        span.end_ns = monotonic_ns();
        mine.push_back(span);
        hold->release(ec);
        if (ec) failed.push_back("release: " + ec.message());
      }
      std::lock_guard g(m);
      for (auto& s : mine) history.add(s);
      failures.insert(failures.end(), failed.begin(), failed.end());
    });
  }
  for (auto& t : pool) t.join();
  WARN(L::combination_name() << ": " << history.size() << " acquires by " << threads << " threads on " << names
                             << " locks, the longest " << longest_us.load() << " us; " << slow.load()
                             << " tries not acknowledged or unanswered in time, tried again");
  INFO(failures.size() << " failures, the first: " << (failures.empty() ? "" : failures.front()));
  CHECK(failures.empty());
  CHECK(history.size() == std::size_t(waits));
  auto overlaps = history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
  std::string left;
  CHECK(wait_until([&] { return (left = channels_left(redis)).empty(); }, linger + scaled(2s)));
  INFO("subscribed on the servers:\n" << left);
  CHECK(left.empty());
  CHECK(wait_until([&] { return own_channels(redis) == 0; }, linger + scaled(2s)));
  auto keys = keys_after(redis, scaled(1s));
  INFO("keys left:\n" << keys);
  CHECK(keys.empty());
}

/// Fault 9: while one client holds the lock, others give up on it in every
/// way there is: an async wait cancelled, a lock object destroyed with its
/// async wait in flight, a blocking wait that runs out, a hold destroyed
/// without a release, in 12 rounds, the holder letting go before or after
/// them. After each round a fresh client takes the lock at once (nobody
/// kept it, no line entry outlived its waiter); at the end nothing renews,
/// nothing is subscribed and no key is left.
template <class F, class L>
void abandoned_waits_scenario() {
  namespace asio = boost::asio;
  using B = typename F::backend_type;
  F redis;
  auto other = redis.another();  // the holder's: another client, not this thread's owner again
  const auto lease = scaled(2s);
  const std::string name = "abandoned:" + L::combination_name();
  auto& renewals = redis.backend.template use_service<detail::renewal_service<B>>();
  auto& holder_renewals = other->template use_service<detail::renewal_service<B>>();
  hold_history history;
  int aborted = 0, won_then_dropped = 0;
  for (int round = 0; round < 12; ++round) {
    CAPTURE(round);
    auto holder = make_fault_lock<L>(*other, name, lease);
    auto held = holder->try_acquire_for(lease * 2);
    REQUIRE(held);
    hold_span span{name, "holder", monotonic_ns(), 0, false};
    // An async wait, cancelled.
    auto cancelled = make_fault_lock<L>(redis.backend, name, lease);
    asio::cancellation_signal cancel;
    std::promise<std::pair<error_code, bool>> cancelled_result;
    cancelled->async_acquire("cancelled", asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, auto h) {
                               cancelled_result.set_value({ec, bool(h)});  // a won hold is dropped here
                             }));
    // An async wait whose lock object is destroyed.
    auto abandoned = make_fault_lock<L>(redis.backend, name, lease);
    std::promise<std::pair<error_code, bool>> abandoned_result;
    abandoned->async_acquire("abandoned", [&](error_code ec, auto h) { abandoned_result.set_value({ec, bool(h)}); });
    // A blocking wait that runs out.
    auto timed_out = make_fault_lock<L>(redis.backend, name, lease);
    std::error_code ec;
    CHECK_FALSE(timed_out->try_acquire_for(scaled(30ms), ec));
    CHECK(ec == error::not_acquired);
    std::this_thread::sleep_for(std::chrono::milliseconds(round % 4 * 3));
    const bool release_first = round % 2 == 0;
    if (release_first) {
      span.end_ns = monotonic_ns();
      held->release();
    }
    asio::post(redis.backend.get_executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
    abandoned.reset();  // ~Lock ends its wait, and waits until the wait no longer uses it
    auto abandoned_future = abandoned_result.get_future();
    REQUIRE(abandoned_future.wait_for(scaled(5s)) == std::future_status::ready);
    auto cancelled_future = cancelled_result.get_future();
    REQUIRE(cancelled_future.wait_for(scaled(5s)) == std::future_status::ready);
    for (auto [code, won] : {abandoned_future.get(), cancelled_future.get()}) {
      // Aborted, or (the holder gone first) won and dropped by the handler.
      CHECK((code == asio::error::operation_aborted || (!code && won && release_first)));
      aborted += code == asio::error::operation_aborted;
      won_then_dropped += won;
    }
    if (!release_first) {
      span.end_ns = monotonic_ns();
      held->release();
    }
    history.add(span);
    cancelled.reset();  // waits for the release of a hold its handler dropped
    // A hold destroyed without a release, then a fresh client at once.
    { auto dropped = holder->try_acquire_for(scaled(1s)); REQUIRE(dropped); }
    auto fresh = make_fault_lock<L>(redis.backend, name, lease);
    auto taken = fresh->try_acquire_for(scaled(500ms), ec);
    INFO("a fresh client: " << ec.message());
    REQUIRE(taken);
    history.add(hold_span{name, "fresh", monotonic_ns(), monotonic_ns(), false});
    taken->release();
  }
  WARN(L::combination_name() << ": 12 rounds, " << aborted << " waits aborted, " << won_then_dropped
                             << " won and dropped by their handler");
  CHECK(renewals.size() == 0);
  CHECK(holder_renewals.size() == 0);
  CHECK(wait_until([&] { return own_channels(redis) == 0; }, linger + scaled(2s)));
  std::string left;
  CHECK(wait_until([&] { return (left = channels_left(redis)).empty(); }, linger + scaled(2s)));
  INFO("subscribed on the servers:\n" << left);
  CHECK(left.empty());
  auto keys = keys_after(redis, scaled(1s));  // sooner than any lease
  INFO("keys left:\n" << keys);
  CHECK(keys.empty());
  auto overlaps = history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
}

}  // namespace dlock::test::faults

// Faults 7 to 9 for one lock of each kind on the backend of FIXTURE.
#define SERVER_FAULT_SCENARIOS(FIXTURE, BACKEND, TAG)                                                            \
  TEMPLATE_LIST_TEST_CASE("fault 7: disturbed servers give clear errors and nobody stays stuck",                 \
                          "[faults][" TAG "]", dlock::test::faults::fault_kinds_t<BACKEND>) {                   \
    dlock::test::faults::disturbed_servers_scenario<FIXTURE, TestType>();                                       \
  }                                                                                                            \
  TEMPLATE_LIST_TEST_CASE("fault 8: no wake-up is lost and no subscription outlives its waits",                  \
                          "[faults][" TAG "]", dlock::test::faults::woken_kinds_t<BACKEND>) {                   \
    dlock::test::faults::wake_up_scenario<FIXTURE, TestType>();                                                 \
  }                                                                                                            \
  TEMPLATE_LIST_TEST_CASE("fault 9: cancelled and abandoned waits leave nothing held or renewing",              \
                          "[faults][" TAG "]", dlock::test::faults::fault_kinds_t<BACKEND>) {                   \
    dlock::test::faults::abandoned_waits_scenario<FIXTURE, TestType>();                                         \
  }
