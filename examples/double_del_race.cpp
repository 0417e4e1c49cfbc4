// The double-DEL race of the expiry locks (A3n, and its fix A3): the lock's
// value is its expiration time, and the key never expires. Two clients find
// the stored time in the past and both try to steal the lock.
// - A3n, ownership::NaiveExpiry: GET, see it expired, DEL, SETNX. C steals
//   first; then B's DEL deletes C's fresh lock and B's SETNX wins too: both
//   hold the lock.
// - A3, ownership::GetSetExpiry (redis-objects): GETSET writes a new time and
//   answers the old one; only the client that reads back the expired time
//   has the lock.
// The interleaving is forced, not hoped for: each policy's test seam
// (between_get_and_del, between_get_and_getset) holds both clients until
// both have seen the lock expired, and holds B until C has finished.
//
//   double_del_race [redis://host:port]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <dlock/dlock.hpp>
#include <dlock/ownership/naive_expiry.hpp>
#include <support/polling.hpp>
#include "example_redis.hpp"

using namespace std::chrono_literals;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
using dlock::test::scaled;

namespace {

// What happened, in order, from both clients' threads.
struct story_log {
  std::mutex m;
  std::vector<std::string> lines;
  void add(std::string line) {
    std::lock_guard g(m);
    lines.push_back(std::move(line));
  }
};

// Clients B and C, each with its own backend, race for `key`, which holds an
// expiration a minute in the past. `seam` is the ownership's hook between
// its GET and its steal. Returns how many clients hold the lock, or -1 when
// the forced interleaving did not happen.
template <class O>
int race(const std::string& url, const std::string& key, std::function<void()> O::*seam, const char* steal,
         const char* late_steal) {
  dlock::RedisBackend backend_b(url), backend_c(url);
  backend_b.command(dlock::redis::request().push("SET", key, O::format(O{}.wall_clock() - 60)));
  using L = dlock::Lock<dlock::RedisBackend, O, r::FixedLease, w::TryOnce>;
  story_log log;
  std::promise<void> b_saw, c_saw, c_done;
  auto b_saw_f = b_saw.get_future(), c_saw_f = c_saw.get_future(), c_done_f = c_done.get_future();
  std::atomic<bool> forced = true;
  const auto limit = scaled(5s);

  O ob, oc;
  ob.*seam = [&] {  // runs on B's I/O thread, between its GET and its steal
    log.add("  B: GET: the stored time has passed, the lock is free to steal");
    b_saw.set_value();
    // B is the slower one: it goes on only once C has seen it too and finished.
    if (c_saw_f.wait_for(limit) != std::future_status::ready || c_done_f.wait_for(limit) != std::future_status::ready)
      forced = false;
    log.add(std::string("  B: ") + late_steal);
  };
  oc.*seam = [&] {
    log.add("  C: GET: the stored time has passed, the lock is free to steal");
    c_saw.set_value();
    if (b_saw_f.wait_for(limit) != std::future_status::ready) forced = false;
    log.add(std::string("  C: ") + steal);
  };
  L lock_b(backend_b, key, ob, r::FixedLease{scaled(10s)}, w::TryOnce{});
  L lock_c(backend_c, key, oc, r::FixedLease{scaled(10s)}, w::TryOnce{});
  // Two holders at once would make the releases' reports noise: say nothing.
  lock_b.set_error_handler([](std::error_code, const std::string&) {});
  lock_c.set_error_handler([](std::error_code, const std::string&) {});

  auto b = std::async(std::launch::async, [&] { return lock_b.try_lock(); });
  auto c = std::async(std::launch::async, [&] {
    bool got = lock_c.try_lock();
    log.add(std::string("  C: ") + (got ? "holds the lock" : "did not get the lock"));
    c_done.set_value();
    return got;
  });
  bool c_got = c.get(), b_got = b.get();
  log.add(std::string("  B: ") + (b_got ? "holds the lock" : "did not get the lock"));

  std::printf("%s (%s):\n", L::combination_name().c_str(), steal);
  for (auto& line : log.lines) std::printf("%s\n", line.c_str());
  int holders = int(b_got) + int(c_got);
  std::printf("  holders: %d\n", holders);
  // Leaving this scope releases what each lock object holds (a DEL each).
  return forced ? holders : -1;
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  int naive = race<o::NaiveExpiry>(target.url, "tour:race:naive", &o::NaiveExpiry::between_get_and_del,
                                   "DEL, then SETNX", "DEL (deletes the lock C just took), then SETNX");
  int getset = race<o::GetSetExpiry>(target.url, "tour:race:getset", &o::GetSetExpiry::between_get_and_getset,
                                     "GETSET", "GETSET (reads back the time C just wrote: not expired)");
  dlock::RedisBackend cleanup(target.url);
  cleanup.command(dlock::redis::request().push("DEL", "tour:race:naive", "tour:race:getset"));

  if (naive < 0 || getset < 0) {
    std::printf("unexpected: a client never reached its test seam, so the race was not forced\n");
    std::printf("verdict: the race could not be forced\n");
    return 1;
  }
  std::printf("\nWhat it teaches: GET and DEL are two commands, and between them another client\n"
              "can steal the lock and get deleted. GETSET reads and writes in one atomic step:\n"
              "of the clients that saw the lock expired, only the first reads back the old time.\n"
              "(GETSET's remaining flaw: every client's wall clock must agree.)\n");
  std::printf("verdict: naive DEL+SETNX let %d clients in; GETSET let %d\n", naive, getset);
  if (naive != 2 || getset != 1) {
    std::printf("unexpected: the naive lock should let 2 clients in and GETSET exactly 1\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "double_del_race: %s\n", e.what());
  return 2;
}
