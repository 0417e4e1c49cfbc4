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
#include <utility>

#include <dlock/dlock.hpp>
#include <support/child_process.hpp>
#include <support/hold_history.hpp>

#include "report.hpp"
#include "report_format.hpp"

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

/// An ownership that can hand out fencing tokens (set its `fencing`).
template <class O>
concept fenceable = requires(O o) { o.fencing = fencing_tokens{}; };

/// L's ownership, with fencing tokens on when `fenced` (and it has them).
template <class L>
typename L::ownership_type ownership_for(bool fenced) {
  typename L::ownership_type o{};
  if constexpr (fenceable<typename L::ownership_type>) {
    if (fenced) o.fencing = fencing_tokens{};
  }
  return o;
}

/// The resource of the paused stories: a key `store` that a holder writes
/// in its critical section. With a fencing token (`token` > 0), the write is
/// refused if the store has seen a higher token (`store`'s hash field
/// `highest`, checked and raised in one script); without one, it always
/// goes through. Whether it was accepted.
inline bool store_write(RedisBackend& redis, const std::string& store, std::uint64_t token) {
  static const char* check = R"lua(
local highest = tonumber(redis.call('HGET', KEYS[1], 'highest') or '0')
local token = tonumber(ARGV[1])
if token > 0 and token < highest then return 0 end
if token > highest then redis.call('HSET', KEYS[1], 'highest', ARGV[1]) end
redis.call('HINCRBY', KEYS[1], 'writes', 1)
return 1
)lua";
  return redis.command(redis::request().push("EVAL", check, 1, store, token)).integer == 1;
}

using format::fmt_ms;

/// How a paused holder's story ended.
struct paused_end {
  std::int64_t ended = 0, late = 0;  ///< its "end" and its late write (CLOCK_MONOTONIC ns)
  bool late_ok = false;              ///< the store took the late write
  std::string release;               ///< what its release reported
  bool other = false, overlap = false;  ///< another client got the lock; the two holds overlapped
};

/// What the paused-holder story's drawing shows, in words.
inline std::string paused_sentence(const fault_result& f, bool signalled, const std::string& lease_words,
                                   bool late_write_taken) {
  if (!f.paused_other_acquired)
    return "The holder was stopped with SIGSTOP, and its key has no lease: another client waited " +
           fmt_ms(f.waited_ms) + " and gave up, so the two never overlapped (and the lock of a holder that never "
           "resumes is never freed).";
  std::string s = "The holder was stopped with SIGSTOP for longer than its " + lease_words + ". ";
  s += "Its lease ran out on the server, another client took the lock, and the holder, resumed, went on with its "
       "work as if it still held it: ";
  s += f.paused_overlap ? "the two critical sections overlapped. " : "yet the two did not overlap. ";
  if (signalled)
    s += "The loss signal fired as soon as the holder ran again, before its late write; this holder does not "
         "check it. ";
  if (late_write_taken) s += "Its late write went through, over the other client's. ";
  s += "Its release reported " + f.paused_release + ". A fencing token checked by the resource is what refuses "
       "such a late write.";
  return s;
}

/// The --hold side: acquires `key` with lease `lease_ms` (and fencing
/// tokens when `fenced`), prints "acquired <ns>", writes the store
/// (store_write, at `key`:store, with its token if it has one) and prints
/// "write <ns> ok|refused", works `work_ms` (for ever when negative),
/// writes again (its late write, after a pause) and prints that, prints
/// "end <ns>", releases and prints "released <what>". If the hold's loss
/// signal fires, it prints "lost <ns>" when it does.
template <class L>
int hold_main(const std::string& url, const std::string& key, long long lease_ms, long long work_ms, bool fenced) {
  RedisBackend redis(url);
  L lock(redis, key, ownership_for<L>(fenced), with_lease<L>(std::chrono::milliseconds(lease_ms)));
  auto hold = lock.acquire();
  const auto acquired = test::monotonic_ns();
  // The work ends work_ms after the acquire (CLOCK_MONOTONIC runs on while
  // the process is stopped, so a pause does not stretch it).
  const auto end = acquired + work_ms * 1'000'000;
  std::printf("acquired %lld\n", static_cast<long long>(acquired));
  std::fflush(stdout);
  if (fenced && !hold.fencing_token()) throw std::runtime_error("a fenced hold without a fencing token");
  auto write = [&] {
    const bool ok = store_write(redis, key + ":store", hold.fencing_token().value_or(0));
    std::printf("write %lld %s\n", static_cast<long long>(test::monotonic_ns()), ok ? "ok" : "refused");
    std::fflush(stdout);
  };
  write();
  hold.on_lost([] {
    std::printf("lost %lld\n", static_cast<long long>(test::monotonic_ns()));
    std::fflush(stdout);
  });
  if (work_ms < 0) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  while (test::monotonic_ns() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  write();
  std::printf("end %lld\n", static_cast<long long>(test::monotonic_ns()));
  std::error_code ec;
  hold.release(ec);
  // A short verdict for the table: the two codes a late release can give.
  std::string what = !ec ? "ok" : ec == error::lease_lost ? "lease_lost" : ec == error::not_owner ? "not_owner" : ec.message();
  std::printf("released %s\n", what.c_str());
  std::fflush(stdout);
  return 0;
}

/// The parent side: the fault stories for lock type L, with lease `lease`,
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
  auto child = [&](const std::string& k, long long work_ms, bool fenced) {
    return std::make_unique<test::child_process>(
        self, std::vector<std::string>{"--hold", f.combination, url, k, std::to_string(lease.count()),
                                       std::to_string(work_ms), fenced ? "fenced" : "plain"});
  };
  // The holder's next line but "lost <ns>" lines (noted in `lost`),
  // which must start with `word`; the number after it.
  std::optional<std::int64_t> lost;
  auto expect = [&](test::child_process& c, std::string_view word) {
    auto line = c.read_line(seconds(20));
    while (line.rfind("lost ", 0) == 0) {
      lost = std::stoll(line.substr(5));
      line = c.read_line(seconds(20));
    }
    if (line.substr(0, word.size()) != word)
      throw std::runtime_error(f.combination + ": the holder process said '" + line + "', not " + std::string(word));
    return line.size() > word.size() ? std::stoll(line.substr(word.size() + 1)) : 0LL;
  };
  const bool fixed_lease = R::expires && !R::renews;
  const auto lease_ns = static_cast<std::int64_t>(f.lease_ms * 1e6);
  const std::string lease_words = fmt_ms(f.lease_ms) + " lease";
  const auto wait_limit = lease * 3 + milliseconds(500);
  f.waited_ms = static_cast<double>(wait_limit.count());

  {  // Killed: SIGKILL, then another client waits for the lock.
    auto holder = child(key + ":killed", -1, false);
    auto started = expect(*holder, "acquired");
    timeline story("killed", "a holder killed (SIGKILL) while it holds", started);
    std::this_thread::sleep_for(milliseconds(50));  // a while at its work, so that its hold shows
    holder->kill();
    auto t0 = test::monotonic_ns();
    story.hold("holder", started, t0);
    story.event("holder", t0, "kill", "SIGKILL");
    if (fixed_lease) story.event("holder", started + lease_ns, "lease_end", "its lease ends");
    L lock(redis, key + ":killed", {}, with_lease<L>(lease));
    if (auto h = lock.try_acquire_for(wait_limit)) {
      f.killed_freed_ms = ms_since(t0);
      auto got = test::monotonic_ns();
      std::this_thread::sleep_for(milliseconds(20));  // its work, so that its hold shows
      story.hold("another client", got, test::monotonic_ns());
      h->release();
      story.say("The holder was killed with the lock held, 50 ms after it took it, and released nothing; another "
                "client, waiting from the kill, got the lock " + fmt_ms(*f.killed_freed_ms) + " later: the " +
                lease_words + ", which began when the holder took the lock, ran out on the server." );
    } else {
      story.event("another client", t0 + static_cast<std::int64_t>(f.waited_ms * 1e6), "refused", "gave up");
      story.say("The holder was killed with the lock held, and its key has no lease: another client waited " +
                fmt_ms(f.waited_ms) + " and gave up. Nothing frees the lock but a person.");
    }
    f.timelines.push_back(std::move(story));
  }
  // Paused: SIGSTOP past the lease, another client takes its turn and
  // writes the store, SIGCONT; the resumed holder's late write goes
  // through, or, with fencing tokens, is refused.
  auto paused = [&](bool fenced) {
    const std::string k = key + (fenced ? ":fenced" : ":paused");
    auto holder = child(k, static_cast<long long>(lease.count()) * 2, fenced);
    lost.reset();
    auto started = expect(*holder, "acquired");
    timeline story(fenced ? "paused_fenced" : "paused",
                   fenced ? "the same pause, with fencing tokens that the store checks"
                          : R::expires ? "a holder stopped (SIGSTOP) past its lease, then resumed"
                                       : "a holder stopped (SIGSTOP) for a while, then resumed",
                   started);
    story.event("holder", expect(*holder, "write"), "write", "writes");
    story.event("holder", test::monotonic_ns(), "stop", "SIGSTOP");  // stamped first: it cannot act earlier
    ::kill(holder->pid(), SIGSTOP);
    if (fixed_lease) story.event("holder", started + lease_ns, "lease_end", "its lease ends");
    bool other = false;
    L lock(redis, k, ownership_for<L>(fenced), with_lease<L>(lease));
    if (auto h = lock.try_acquire_for(wait_limit)) {
      auto mine = test::monotonic_ns();
      other = true;
      if (fenced && !h->fencing_token()) throw std::runtime_error(f.combination + ": a fenced hold without a token");
      store_write(redis, k + ":store", h->fencing_token().value_or(0));
      story.event("another client", test::monotonic_ns(), "write", "writes");
      std::this_thread::sleep_for(milliseconds(50));
      story.hold("another client", mine, test::monotonic_ns());
      std::error_code ec;
      h->release(ec);
    } else {
      story.event("another client", test::monotonic_ns(), "refused", "gave up");
    }
    story.event("holder", test::monotonic_ns(), "cont", "SIGCONT");
    ::kill(holder->pid(), SIGCONT);
    // Then, in its order: the late write, "end", "released", and the loss
    // signal wherever it fired.
    paused_end e;
    while (e.release.empty()) {
      auto line = holder->read_line(seconds(20));
      auto number = [&](std::size_t at) { return static_cast<std::int64_t>(std::stoll(line.substr(at))); };
      if (line.rfind("lost ", 0) == 0) lost = number(5);
      else if (line.rfind("end ", 0) == 0) e.ended = number(4);
      else if (line.rfind("write ", 0) == 0) e.late = number(6), e.late_ok = line.ends_with(" ok");
      else if (line.rfind("released ", 0) == 0) e.release = line.substr(9);
      else throw std::runtime_error(f.combination + ": the paused holder said '" + line + "'");
    }
    story.hold("holder", started, e.ended);
    story.event("holder", e.late, e.late_ok ? "write" : "refused", e.late_ok ? "late write" : "late write refused");
    if (lost) story.event("holder", *lost, "lost", "loss signal");
    story.event("holder", e.ended, e.release == "ok" ? "release" : "refused", "release: " + e.release);
    e.other = other;
    e.overlap = !story.overlaps().empty();
    return std::pair{std::move(story), e};
  };
  {
    auto [story, e] = paused(false);
    f.paused_other_acquired = e.other;
    f.paused_overlap = e.overlap;
    f.paused_release = e.release;
    story.say(paused_sentence(f, lost.has_value(), lease_words, e.late_ok));
    f.timelines.push_back(std::move(story));
  }
  if constexpr (fenceable<typename L::ownership_type> && R::expires) {
    auto [story, e] = paused(true);
    f.fenced_late_write_refused = e.other && !e.late_ok;
    story.say(e.other && !e.late_ok
                  ? "The same pause, but each holder sends its fencing token with its writes, and the store remembers "
                    "the highest it has seen. The holds still overlap (the holder's had not ended when the other "
                    "client's began), but its late write carries an older token than the other client's, and the store refuses it."
                  : "The same pause with fencing tokens: " +
                        std::string(e.other ? "the store took the late write (it should not have)."
                                            : "nobody else got the lock while the holder was stopped."));
    f.timelines.push_back(std::move(story));
  }
  if constexpr (R::expires && !R::renews) {  // Late release: only a lease nobody renews runs out under its holder.
    L first(redis, key + ":late", {}, with_lease<L>(lease));
    auto h = first.acquire();
    const auto started = test::monotonic_ns();
    timeline story("late", "a holder that works past its fixed lease, then releases", started);
    story.event("first holder", started + lease_ns, "lease_end", "its lease ends");
    std::this_thread::sleep_for(lease + milliseconds(50));
    RedisBackend other_backend(url);
    L second(other_backend, key + ":late", {}, with_lease<L>(seconds(30)));
    auto h2 = second.try_acquire_for(wait_limit);
    if (!h2) throw std::runtime_error(f.combination + ": nobody could take the expired lock");
    const auto second_got = test::monotonic_ns();
    std::this_thread::sleep_for(milliseconds(50));  // the first holder's work goes on meanwhile
    first.set_error_handler([](std::error_code, const std::string&) {});
    std::error_code ec;
    const auto release_sent = test::monotonic_ns();
    h.release(ec);
    story.hold("first holder", started, release_sent);
    f.late_release_deleted_other = redis.command(redis::request().push("EXISTS", key + ":late")).integer == 0;
    story.event("first holder", release_sent, *f.late_release_deleted_other ? "delete" : "refused",
                *f.late_release_deleted_other ? "its release deletes the other's key" : "release refused: not its key");
    second.set_error_handler([](std::error_code, const std::string&) {});
    story.hold("second client", second_got, test::monotonic_ns());
    h2->release(ec);
    story.say(*f.late_release_deleted_other
                  ? "The first holder's " + lease_words + " ran out while it still worked; a second client took the "
                    "lock, and the first one's release, which checks no owner, deleted the second client's key: a third "
                    "client could now get in beside it."
                  : "The first holder's " + lease_words + " ran out while it still worked, and a second client took "
                    "the lock: the two overlapped. The first one's release checked the owner and left the second "
                    "client's key alone.");
    f.timelines.push_back(std::move(story));
  }
  if constexpr (reads_wall_clock<typename L::ownership_type>) {
    using O = typename L::ownership_type;
    L honest(redis, key + ":skew", {}, with_lease<L>(lease));
    auto h = honest.acquire();
    const auto started = test::monotonic_ns();
    timeline story("skew", "a client whose wall clock runs ahead tries the lock", started);
    story.add_lane("honest holder");
    O fast;
    f.skew_s = 2 * duration<double>(lease).count();
    fast.wall_clock = [skew = f.skew_s, real = O{}.wall_clock] { return real() + skew; };
    RedisBackend other_backend(url);
    L skewed(other_backend, key + ":skew", fast, with_lease<L>(lease));
    // One try, made while the honest hold is young: its lease has most of its time left.
    const auto tried = test::monotonic_ns();
    story.event("clock ahead", tried, "skew", "clock +" + fmt_ms(f.skew_s * 1000));
    f.skewed_clock_stole = skewed.try_lock();
    const auto answered = test::monotonic_ns();
    std::this_thread::sleep_for(milliseconds(20));
    std::error_code ec;
    skewed.set_error_handler([](std::error_code, const std::string&) {});
    honest.set_error_handler([](std::error_code, const std::string&) {});
    if (*f.skewed_clock_stole) {
      story.hold("clock ahead", answered, test::monotonic_ns());
      skewed.unlock(ec);
    } else {
      story.event("clock ahead", answered, "refused", "refused");
    }
    story.hold("honest holder", started, test::monotonic_ns());
    h.release(ec);
    story.say(*f.skewed_clock_stole
                  ? "The lock's key stores when it expires, read against each client's own clock. A client whose "
                    "clock ran " + fmt_ms(f.skew_s * 1000) + " ahead read the honest holder's key as expired and took "
                    "the lock while the holder still worked."
                  : "A client whose clock ran " + fmt_ms(f.skew_s * 1000) + " ahead tried the lock while the honest "
                    "holder worked, and was refused.");
    f.timelines.push_back(std::move(story));
  }
  return f;
}

}  // namespace dlock::compare
