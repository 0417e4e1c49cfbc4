// The tour: a release that comes after the lease ran out. Client A's work
// outlasts its lease, B takes the lock, then A releases. With a bare SETNX
// lock (A1b) the release is a plain DEL: it deletes B's key, and a third
// client C walks in beside B. With a token (A2) the release is a Lua
// compare-and-delete: it is refused (lease_lost) and B keeps its lock.
//
//   late_release [redis://host:port]
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>

#include <dlock/dlock.hpp>
#include <support/polling.hpp>
#include "example_redis.hpp"

namespace {

namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
using namespace std::chrono_literals;

// What happened to one design.
struct outcome {
  std::error_code a_release;  // what A's late release reported
  bool b_key_deleted = false;  // B's key was gone after it
  bool c_got_in = false;       // a third client then took the lock
};

// A holds `name` with a short lease and works past it; B takes the lock;
// then A releases late, and C tries. Each client on its own backend.
template <class O>
outcome late_release(const std::string& url, const std::string& name) {
  using L = dlock::Lock<dlock::RedisBackend, O, r::FixedLease, w::TryOnce>;
  dlock::RedisBackend a(url), b(url), c(url);
  L lock_a(a, name, {}, r::FixedLease{dlock::test::scaled(300ms)});
  L lock_b(b, name, {}, r::FixedLease{dlock::test::scaled(10s)});
  L lock_c(c, name, {}, r::FixedLease{dlock::test::scaled(10s)});
  auto exists = [&] { return a.command(dlock::redis::request().push("EXISTS", name)).integer == 1; };

  auto hold_a = lock_a.acquire();
  // A's work outlasts its lease: it goes on until Redis has expired the key
  // (and A's loss signal has fired, which A ignores).
  if (!dlock::test::wait_until([&] { return hold_a.lost() && !exists(); }))
    throw std::runtime_error("A's lease did not run out");
  auto hold_b = lock_b.try_acquire();
  if (!hold_b) throw std::runtime_error("B could not take the expired lock");

  outcome result;
  hold_a.release(result.a_release);  // the late release
  result.b_key_deleted = !exists();
  auto hold_c = lock_c.try_acquire();
  result.c_got_in = hold_c.has_value();
  std::error_code ignored;  // B's release may find its key gone: it is the story, not an error here
  if (hold_c) hold_c->release(ignored);
  hold_b->release(ignored);
  return result;
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  const std::string name = "lock:order:42";
  {
    dlock::RedisBackend redis(target.url);
    redis.command(dlock::redis::request().push("DEL", name));
  }

  auto bare = late_release<o::SetNx>(target.url, name);
  std::printf("setnx/fixed: A's work outlasted its lease; the key expired and B took the lock.\n");
  std::printf("  A's late release reported \"%s\", but its DEL ran anyway: B's key is %s.\n",
              bare.a_release ? bare.a_release.message().c_str() : "ok", bare.b_key_deleted ? "gone" : "still there");
  std::printf("  a third client C %s.\n",
              bare.c_got_in ? "then took the lock: B and C both hold it" : "could not take the lock");

  auto token = late_release<o::Token>(target.url, name);
  std::printf("token/fixed: the same story; the release deletes the key only if it holds A's token.\n");
  std::printf("  A's late release reported \"%s\" and deleted nothing: B's key is %s.\n",
              token.a_release ? token.a_release.message().c_str() : "ok",
              token.b_key_deleted ? "gone" : "still there");
  std::printf("  a third client C %s.\n", token.c_got_in ? "took the lock beside B" : "could not take it: B still holds it");

  std::printf("What it teaches: a release must check that the lock is still its own; a plain DEL\n"
              "cannot, so a slow client frees a lock it no longer holds. Checking the release's\n"
              "result (lease_lost) is also how A learns that its work overlapped B's.\n");
  bool flaw_shown = bare.b_key_deleted && bare.c_got_in;
  bool fix_works = token.a_release == dlock::error::lease_lost && !token.b_key_deleted && !token.c_got_in;
  if (!flaw_shown) std::printf("unexpected: setnx's late release did not let a third client in beside B\n");
  if (!fix_works) std::printf("unexpected: token's late release was not refused, or B lost its lock\n");
  if (flaw_shown && fix_works)
    std::printf("verdict: setnx's late release deleted B's key and let C in beside B; "
                "token refused it (lease_lost) and B kept the lock\n");
  else
    std::printf("verdict: unexpected outcome (see above)\n");
  return flaw_shown && fix_works ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "late_release: %s\n", e.what());
  return 2;
}
