// bench_cycle: the uncontended lock cycle against its floors and against
// redis-py's Lock, every subject measured the same way in one run.
//
// Subjects, each a block of N cycles timed one by one on this thread:
// - two PINGs on a plain blocking socket (the least two round trips cost);
// - floors: the commands of a cycle written on a plain socket with nothing
//   around them (dlock's Token, the default Lock<>'s ReentrantHash, and
//   redis-py's Lock's);
// - redis-py's Lock (Debian's python3-redis, compare/redis_py_lock.py),
//   timed inside its own process as it runs;
// - dlock: Token and the default Lock<>, each through the std interface
//   (lock()/unlock()) and the Hold interface (acquire()/release()).
// Each round runs every block once, in an order that rotates from round to
// round (A B C ..., then B C ... A): the machine's drift falls on every
// subject alike. A ratio is taken inside a round, between two blocks' medians,
// and the table gives the median of a ratio over the rounds.
//
// Placement (--placement): on a small virtual machine a round trip between
// two CPUs costs a wake-up of the other CPU, several times a round trip on
// one CPU, and the scheduler flips between the two; so the server's main
// thread and this program (and redis-py, its child) are pinned, every
// subject alike: by default all on one CPU ("same", where a cycle's time
// is the two processes' work, as in dlock-compare); "split" puts the
// server on one CPU and the clients on another, as a network would; "free"
// pins nothing.
// --only TEXT keeps the subjects whose name contains TEXT (to profile one).
//
//   bench_cycle [redis://URL | unix://PATH] [--rounds R] [--block N] [--placement split|same|free] [--only TEXT]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/dlock.hpp>
#include <lock/lock_instances.hpp>  // every combination on RedisBackend, compiled once
#include <support/placement.hpp>
#include <support/redis_py_lock.hpp>
#include <support/redis_server.hpp>

#include "bench_support.hpp"

namespace {

using bench_clock = std::chrono::steady_clock;
using kind = dlock::bench::floor_cycle::kind;
using TokenLock = dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::Spin>;
using DefaultLock = dlock::Lock<>;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Times `n` calls of `one` (microseconds each).
std::vector<double> timed(int n, const std::function<void()>& one) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto t0 = bench_clock::now();
    one();
    out.push_back(std::chrono::duration<double, std::micro>(bench_clock::now() - t0).count());
  }
  return out;
}

struct subject {
  std::string name;
  std::function<std::vector<double>(int)> block;  // n cycles, each timed
  std::string floor;                              // the floor it is held against ("" for none)
  std::vector<double> p50s;                       // one per round
};

void need(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("bench_cycle: ") + what + " failed");
}

// `lock`'s cycle through both interfaces, held against the floor `floor`.
template <class L>
void add_lock_subjects(std::vector<subject>& subjects, const std::string& label, L& lock, const std::string& floor) {
  subjects.push_back({label + " lock()/unlock()", [&lock](int n) {
                        return timed(n, [&] {
                          lock.lock();
                          std::error_code ec;
                          lock.unlock(ec);
                          if (ec) throw std::system_error(ec, "bench_cycle: unlock");
                        });
                      }, floor, {}});
  subjects.push_back({label + " acquire()/release()", [&lock](int n) {
                        return timed(n, [&] { lock.acquire().release(); });
                      }, floor, {}});
}

int usage(const char* why) {
  std::fprintf(stderr,
               "bench_cycle: %s\nusage: bench_cycle [redis://URL | unix://PATH] [--rounds R] [--block N] "
               "[--placement split|same|free] [--only TEXT]\n",
               why);
  return 2;
}

int run(int argc, char** argv) {
  dlock::bench::warn_if_unoptimized();
  int rounds = 9, block = 300;
  std::string url, only;
  auto where = dlock::test::placement::same;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--placement" && i + 1 < argc) {
      if (!dlock::test::parse_placement(argv[++i], where)) return usage("--placement is split, same or free");
    } else if ((a == "--rounds" || a == "--block") && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (!end || *end || v < 1 || v > 1000000) return usage("--rounds and --block need a positive number");
      (a == "--rounds" ? rounds : block) = static_cast<int>(v);
    } else if (a.rfind("redis://", 0) == 0 || a.rfind("unix://", 0) == 0) {
      url = a;
    } else {
      return usage(("unknown argument '" + std::string(a) + "'").c_str());
    }
  }
  std::unique_ptr<dlock::test::redis_server> server;
  if (url.empty()) {
    server = std::make_unique<dlock::test::redis_server>();
    url = server->url();
  }
  // Before anything starts a thread or a process: they inherit it.
  dlock::test::pinned pin(where, server ? server->pid() : -1);
  dlock::RedisBackend redis(url);
  dlock::bench::plain_socket pings(url);
  dlock::bench::floor_cycle token_floor(url, kind::token, "bench_cycle:floor:token");
  dlock::bench::floor_cycle py_floor(url, kind::redis_py, "bench_cycle:floor:redis-py");
  dlock::bench::floor_cycle hash_floor(url, kind::hash, "bench_cycle:floor:hash");
  TokenLock token(redis, "bench_cycle:token");
  DefaultLock deflt(redis, "bench_cycle:default");

  std::vector<subject> subjects;
  subjects.push_back({"2 PINGs, plain socket", [&](int n) {
                        return timed(n, [&] { need(pings.ping() && pings.ping(), "PING"); });
                      }, "", {}});
  subjects.push_back({"floor: Token's commands", [&](int n) {
                        return timed(n, [&] { need(token_floor.cycle(), "Token's floor"); });
                      }, "", {}});
  subjects.push_back({"floor: Lock<>'s commands", [&](int n) {
                        return timed(n, [&] { need(hash_floor.cycle(), "Lock<>'s floor"); });
                      }, "", {}});
  subjects.push_back({"floor: redis-py's commands", [&](int n) {
                        return timed(n, [&] { need(py_floor.cycle(), "redis-py's floor"); });
                      }, "", {}});
  std::unique_ptr<dlock::test::redis_py_lock> py;
  try {
    py = std::make_unique<dlock::test::redis_py_lock>("/usr/bin/python3", DLOCK_REDIS_PY_SCRIPT, url,
                                                      "bench_cycle:redis-py");
    subjects.push_back({"redis-py Lock", [&](int n) { return py->cycles(n); }, "floor: redis-py's commands", {}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cycle: redis-py's Lock is not measured: %s\n", e.what());
  }
  add_lock_subjects(subjects, "Token", token, "floor: Token's commands");
  add_lock_subjects(subjects, "Lock<>", deflt, "floor: Lock<>'s commands");

  std::erase_if(subjects, [&](const subject& s) { return s.name.find(only) == std::string::npos; });
  if (subjects.empty()) return usage("--only matches no subject");
  for (auto& s : subjects) s.block(20);  // warm up: connections, scripts, caches
  std::fprintf(stderr, "bench_cycle: %d rounds of %zu blocks of %d cycles on %s (%s: %s)\n", rounds, subjects.size(),
               block, server ? "a private redis-server" : url.c_str(), dlock::test::placement_name(where),
               pin.describe().c_str());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < subjects.size(); ++k) {
      auto& s = subjects[(k + static_cast<std::size_t>(r)) % subjects.size()];
      s.p50s.push_back(median(s.block(block)));
    }
  }

  auto find = [&](const std::string& name) -> const subject* {
    for (auto& s : subjects)
      if (s.name == name) return &s;
    return nullptr;
  };
  // The median over rounds of a / b, each round's blocks against each other.
  auto ratio = [&](const subject* a, const subject* b) {
    if (!a || !b) return 0.0;
    std::vector<double> v;
    for (int r = 0; r < rounds; ++r) v.push_back(a->p50s[static_cast<std::size_t>(r)] / b->p50s[static_cast<std::size_t>(r)]);
    return median(v);
  };
  const subject* two_pings = find("2 PINGs, plain socket");
  const subject* ref = find("redis-py Lock");
  std::printf("bench_cycle: %d rounds, %d cycles per block, placement %s (%s); each figure is the median\n"
              "over rounds of a ratio taken within a round\n\n",
              rounds, block, dlock::test::placement_name(where), pin.describe().c_str());
  std::printf("%-28s %9s %12s %14s %13s\n", "subject", "p50 us", "/ 2 PINGs", "/ own floor", "x redis-py rate");
  for (auto& s : subjects) {
    std::printf("%-28s %9.1f %12.3f", s.name.c_str(), median(s.p50s), ratio(&s, two_pings));
    if (auto* f = find(s.floor)) std::printf(" %14.3f", ratio(&s, f));
    else std::printf(" %14s", "");
    if (ref) std::printf(" %13.2f", ratio(ref, &s));
    std::printf("\n");
  }
  std::printf("\n/ own floor: against the same commands on a plain socket (Token's, Lock<>'s = ReentrantHash's,\n"
              "redis-py's); x redis-py rate: redis-py's cycle time over this one's (above 1: faster than redis-py).\n"
              "Token: Lock<RedisBackend, Token, FixedLease, Spin>; Lock<>: ReentrantHash, Watchdog, PubSub.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
