// Helpers of the ACL tests: docs/acl.md's rules read from the page, a user
// made on a real server, a lock type exercised as that user, and the check
// that a rule grants nothing unused.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <support/redis_server.hpp>

#include "lock_support.hpp"

namespace dlock::test::acl {

using namespace std::chrono_literals;

// The words of the rule in `file` after its "<!-- acl-rule: <which> -->"
// marker, without "ACL SETUSER <user>".
inline std::vector<std::string> documented_rule(const std::string& which, const std::string& file = DLOCK_ACL_DOC) {
  std::ifstream doc(file);
  REQUIRE(doc);
  const std::string marker = "<!-- acl-rule: " + which + " -->";
  std::string line;
  while (std::getline(doc, line) && line != marker) {
  }
  INFO(file << ": " << marker);
  REQUIRE(std::getline(doc, line));
  REQUIRE(line == "```");
  std::vector<std::string> words;
  while (std::getline(doc, line) && line != "```") {
    std::istringstream in(line);
    for (std::string w; in >> w;) words.push_back(w);
  }
  REQUIRE(words.size() > 4);
  REQUIRE(words[0] == "ACL");
  REQUIRE(words[1] == "SETUSER");
  return {words.begin() + 3, words.end()};
}

inline std::vector<std::string> without(std::vector<std::string> rule, const std::string& word) {
  auto it = std::find(rule.begin(), rule.end(), word);
  REQUIRE(it != rule.end());
  rule.erase(it);
  return rule;
}

// The commands a rule grants, as INFO commandstats names them ("get",
// "client|setname").
inline std::vector<std::string> granted_commands(const std::vector<std::string>& rule) {
  std::vector<std::string> out;
  for (const auto& w : rule)
    if (w.size() > 1 && w[0] == '+') out.push_back(w.substr(1));
  return out;
}

// Makes user `user` on `server` with `rule`, and clears the server's
// refusals and command counts.
inline void make_user(const dlock::test::redis_server& server, const std::string& user, const std::vector<std::string>& rule) {
  std::vector<std::string> args{"ACL", "SETUSER", user};
  args.insert(args.end(), rule.begin(), rule.end());
  REQUIRE(server.command(args) == "OK");
  REQUIRE(server.command({"ACL", "LOG", "RESET"}) == "OK");
  REQUIRE(server.command({"CONFIG", "RESETSTAT"}) == "OK");
}

// A server with the user "locks" (password "change-me") made by `rule`.
struct acl_server {
  dlock::test::redis_server server;
  explicit acl_server(const std::vector<std::string>& rule) { make_user(server, "locks", rule); }
  std::string url() const { return "redis://locks:change-me@127.0.0.1:" + std::to_string(server.port()); }
  // What ACL LOG recorded (empty when nothing was refused).
  std::string refusals() const { return server.command({"ACL", "LOG"}); }
};

// Lock type L as the user: a hold, a second client kept out, and a waiter
// served when the hold is released (by its message, for the waits that
// listen for one); on each name.
template <class L>
void exercise(typename L::backend_type& a, typename L::backend_type& b, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    INFO(L::combination_name() << " on " << name);
    auto first = dlock::test::make_lock<L>(a, name);
    auto second = dlock::test::make_lock<L>(b, name);
    auto hold = first->acquire();
    CHECK_FALSE(second->try_acquire());
    auto waiter = std::async(std::launch::async, [&] { return dlock::test::take_within(*second, dlock::test::scaled(5s)).has_value(); });
    std::this_thread::sleep_for(dlock::test::scaled(100ms));
    hold.release();
    CHECK(waiter.get());
  }
}

// The paths a plain run of every combination does not take: the servers
// lost their scripts (EVAL; `flush_scripts` empties each server's cache),
// an expired GETSET lock taken over (GETSET), a hash release of a hold that
// lapsed (HDEL), a FIFO waiter's refresh (LRANGE), fencing tokens (TIME).
template <class Backend>
void exercise_rare_paths(Backend& a, Backend& b, const std::function<void()>& flush_scripts) {
  flush_scripts();
  exercise<Lock<Backend>>(a, b, {"app:flushed"});
  using GetSet = Lock<Backend, ownership::GetSetExpiry, renewal::FixedLease, wait::TryOnce>;
  GetSet stale(a, "app:getset", {}, renewal::FixedLease{200ms}), taker(b, "app:getset");
  stale.set_error_handler([](std::error_code, const std::string&) {});  // its release finds it lost
  stale.lock();
  std::this_thread::sleep_for(400ms);
  CHECK(taker.try_lock());
  taker.unlock();
  // A pub/sub waiter whose sleeps end by its re-check: its next tries
  // register its number only if it is not in the line already (LPOS).
  Lock<Backend> holder(a, "app:recheck");
  Lock<Backend> rechecking(b, "app:recheck", {}, {}, wait::PubSub{.linger = 2000ms, .recheck = 50ms});
  auto held = holder.acquire();
  CHECK_FALSE(rechecking.try_lock_for(300ms));
  held.release();
  // A hash release that finds its hold gone (HDEL takes back the field
  // its HINCRBY made).
  Lock<Backend, ownership::ReentrantHash, renewal::FixedLease, wait::Spin> lapsing(a, "app:lapsing", {},
                                                                                   renewal::FixedLease{200ms});
  lapsing.set_error_handler([](std::error_code, const std::string&) {});
  auto lapsed = lapsing.acquire();
  std::this_thread::sleep_for(400ms);
  std::error_code lost;
  lapsed.release(lost);
  CHECK(lost == error::lease_lost);
  // A FIFO waiter whose entry is refreshed (LRANGE) while it waits.
  using Fifo = Lock<Backend, ownership::Queue, renewal::FixedLease, wait::HandOff>;
  Fifo first(a, "app:fifo"), second(b, "app:fifo", {}, {}, wait::HandOff{std::chrono::milliseconds(90)});
  auto ahead = first.acquire();
  auto behind = std::async(std::launch::async, [&] {
    if (!second.try_lock_for(5s)) return false;
    second.unlock();  // by the thread that holds it
    return true;
  });
  std::this_thread::sleep_for(300ms);
  ahead.release();
  CHECK(behind.get());
  // A semaphore permit without a lease keeps its keys without expiry (PERSIST).
  Lock<Backend, ownership::Semaphore, renewal::None, wait::TryOnce> unleased(a, "app:permits", ownership::Semaphore{2});
  unleased.acquire().release();
  // A read-write lock: readers together (a release that scans the other
  // readers' leases: HKEYS), a writer that waits (its intent) and gives up,
  // a writer's hold and release (HLEN), pub/sub on Redisson's channel.
  using RW = Lock<Backend, ownership::ReadWrite, renewal::Watchdog, wait::PubSub>;
  RW reads(a, "app:rw"), writes(b, "app:rw");
  auto one = reads.acquire_shared();
  auto two = std::async(std::launch::async, [&] { return reads.acquire_shared(); }).get();
  CHECK_FALSE(writes.try_lock_for(300ms));
  two.release();
  one.release();
  auto written = writes.acquire();
  auto reader = std::async(std::launch::async, [&] { return reads.try_acquire_shared_for(5s).has_value(); });
  std::this_thread::sleep_for(300ms);
  written.release();
  CHECK(reader.get());
  ownership::Token fenced;
  fenced.fencing = fencing_tokens{};
  Lock<Backend, ownership::Token, renewal::FixedLease, wait::Spin> token(a, "app:fenced", fenced);
  auto hold = token.acquire();
  CHECK(hold.fencing_token().value_or(0) > 0);
}

// How often a server ran `command` by its `INFO commandstats` (lower case:
// "get", "client|setname"), 0 if never.
inline long long calls_in(const std::string& commandstats, const std::string& command) {
  const auto key = "cmdstat_" + command + ":calls=";
  const auto at = commandstats.find(key);
  return at == std::string::npos ? 0 : std::stoll(commandstats.substr(at + key.size()));
}

// Every command `rule` grants ran on one of the servers whose `INFO
// commandstats` are given (summed; less what `before` counted, for a
// server whose counts cannot be reset): a rule with a command nobody uses
// is not as tight as it can be.
inline void check_every_command_used(const std::vector<std::string>& rule,
                                     const std::vector<std::string>& commandstats,
                                     const std::vector<std::string>& before = {}) {
  for (const auto& command : granted_commands(rule)) {
    long long calls = 0;
    for (const auto& stats : commandstats) calls += calls_in(stats, command);
    for (const auto& stats : before) calls -= calls_in(stats, command);
    INFO("granted and never used: +" << command);
    CHECK(calls > 0);
  }
}

inline std::string commandstats(const dlock::test::redis_server& s) { return s.command({"INFO", "commandstats"}); }

}  // namespace dlock::test::acl
