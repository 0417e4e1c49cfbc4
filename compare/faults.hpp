// dlock-compare's fault stories, one run per ownership and renewal pair:
// - killed: a holder process killed with SIGKILL: how long until another
//   client gets the lock, or never (within the wait);
// - paused: a holder stopped with SIGSTOP past its lease, then resumed:
//   did its critical section overlap another client's?
// - late release: a holder whose fixed lease ran out releases after another
//   client took the lock: whose key did the release delete?
// - skewed clock: for a lock whose key stores an expiration time read
//   against each client's wall clock (the ownership has a `wall_clock`),
//   a client whose clock runs two leases ahead tries the lock while an
//   honest client holds it: does it get in?
// The holder runs in a child process (this program, run with --hold).
#pragma once

#include <signal.h>

#include <chrono>
#include <functional>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <vector>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include <dlock/dlock.hpp>
#include <support/child_process.hpp>
#include <support/hold_history.hpp>

#include "report.hpp"

namespace dlock::compare {

/// The lock type's renewal policy with lease `d`, where it has one.
template <class L>
typename L::renewal_type with_lease(std::chrono::milliseconds d) {
  using R = typename L::renewal_type;
  if constexpr (std::is_constructible_v<R, std::chrono::milliseconds>) return R{d};
  else return R{};
}

/// An ownership that reads each client's wall clock (and lets a test set it).
template <class O>
concept reads_wall_clock = requires(O o) { o.wall_clock = std::function<double()>{}; };

/// The --hold side: acquires `key` with lease `lease_ms`, prints
/// "acquired <ns>", works `work_ms` (for ever when negative), prints
/// "end <ns>", releases and prints "released <what>".
template <class L>
int hold_main(const std::string& url, const std::string& key, long long lease_ms, long long work_ms) {
  RedisBackend redis(url);
  L lock(redis, key, {}, with_lease<L>(std::chrono::milliseconds(lease_ms)));
  auto hold = lock.acquire();
  std::printf("acquired %lld\n", static_cast<long long>(test::monotonic_ns()));
  std::fflush(stdout);
  if (work_ms < 0) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  // The work: in small steps, so that a SIGSTOP in the middle stretches it.
  auto end = test::monotonic_ns() + work_ms * 1'000'000;
  while (test::monotonic_ns() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::printf("end %lld\n", static_cast<long long>(test::monotonic_ns()));
  std::error_code ec;
  hold.release(ec);
  // A short verdict for the table: the two codes a late release can give.
  std::string what = !ec ? "ok" : ec == error::lease_lost ? "lease_lost" : ec == error::not_owner ? "not_owner" : ec.message();
  std::printf("released %s\n", what.c_str());
  std::fflush(stdout);
  return 0;
}

/// The parent side: the three stories for lock type L, with lease `lease`,
/// on keys under `key`. `self` is this program (for --hold).
template <class L>
fault_result fault_stories(RedisBackend& redis, const std::string& self, const std::string& url,
                           const std::string& key, std::chrono::milliseconds lease) {
  using namespace std::chrono;
  using R = typename L::renewal_type;
  fault_result f;
  f.combination = L::combination_name();
  f.ownership = L::ownership_type::policy_name;
  f.renewal = R::policy_name;
  auto policy = with_lease<L>(lease);
  f.lease_ms = static_cast<double>(policy.lease().count());
  f.period_ms = static_cast<double>(policy.period().count());
  auto ms_since = [](std::int64_t t0) { return static_cast<double>(test::monotonic_ns() - t0) / 1e6; };
  auto child = [&](const std::string& k, long long work_ms) {
    return std::make_unique<test::child_process>(
        self, std::vector<std::string>{"--hold", f.combination, url, k, std::to_string(lease.count()),
                                       std::to_string(work_ms)});
  };
  auto expect = [&](test::child_process& c, std::string_view word) {
    auto line = c.read_line(seconds(20));
    if (line.substr(0, word.size()) != word)
      throw std::runtime_error(f.combination + ": the holder process said '" + line + "', not " + std::string(word));
    return line.size() > word.size() ? std::stoll(line.substr(word.size() + 1)) : 0LL;
  };
  const auto wait_limit = lease * 3 + milliseconds(500);
  f.waited_ms = static_cast<double>(wait_limit.count());

  {  // Killed: SIGKILL, then another client waits for the lock.
    auto holder = child(key + ":killed", -1);
    expect(*holder, "acquired");
    holder->kill();
    auto t0 = test::monotonic_ns();
    L lock(redis, key + ":killed", {}, with_lease<L>(lease));
    if (auto h = lock.try_acquire_for(wait_limit)) {
      f.killed_freed_ms = ms_since(t0);
      h->release();
    }
  }
  {  // Paused: SIGSTOP past the lease, another client takes its turn, SIGCONT.
    auto holder = child(key + ":paused", static_cast<long long>(lease.count()) * 2);
    test::hold_history history;
    auto started = expect(*holder, "acquired");
    ::kill(holder->pid(), SIGSTOP);
    L lock(redis, key + ":paused", {}, with_lease<L>(lease));
    if (auto h = lock.try_acquire_for(wait_limit)) {
      auto mine = test::monotonic_ns();
      std::this_thread::sleep_for(milliseconds(50));
      history.add(test::hold_span{"paused", "other", mine, test::monotonic_ns()});
      f.paused_other_acquired = true;
      std::error_code ec;
      h->release(ec);
    }
    ::kill(holder->pid(), SIGCONT);
    auto ended = expect(*holder, "end");
    history.add(test::hold_span{"paused", "paused", started, ended});
    auto line = holder->read_line(seconds(20));
    f.paused_release = line.substr(0, 9) == "released " ? line.substr(9) : line;
    f.paused_overlap = !history.overlaps().empty();
  }
  if constexpr (R::expires && !R::renews) {  // Late release: only a lease nobody renews runs out under its holder.
    L first(redis, key + ":late", {}, with_lease<L>(lease));
    auto h = first.acquire();
    std::this_thread::sleep_for(lease + milliseconds(50));
    RedisBackend other_backend(url);
    L second(other_backend, key + ":late", {}, with_lease<L>(seconds(30)));
    auto h2 = second.try_acquire_for(wait_limit);
    if (!h2) throw std::runtime_error(f.combination + ": nobody could take the expired lock");
    first.set_error_handler([](std::error_code, const std::string&) {});
    std::error_code ec;
    h.release(ec);
    f.late_release_deleted_other = redis.command(redis::request().push("EXISTS", key + ":late")).integer == 0;
    second.set_error_handler([](std::error_code, const std::string&) {});
    h2->release(ec);
  }
  if constexpr (reads_wall_clock<typename L::ownership_type>) {
    using O = typename L::ownership_type;
    L honest(redis, key + ":skew", {}, with_lease<L>(lease));
    auto h = honest.acquire();
    O fast;
    f.skew_s = 2 * duration<double>(lease).count();
    fast.wall_clock = [skew = f.skew_s, real = O{}.wall_clock] { return real() + skew; };
    RedisBackend other_backend(url);
    L skewed(other_backend, key + ":skew", fast, with_lease<L>(lease));
    // One try, made while the honest hold is young: its lease has most of its time left.
    f.skewed_clock_stole = skewed.try_lock();
    std::error_code ec;
    skewed.set_error_handler([](std::error_code, const std::string&) {});
    honest.set_error_handler([](std::error_code, const std::string&) {});
    if (*f.skewed_clock_stole) skewed.unlock(ec);
    h.release(ec);
  }
  return f;
}

}  // namespace dlock::compare
