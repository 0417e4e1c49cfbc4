// Build your own lock from the library's policies: one type, chosen at
// compile time, with each policy a value configured at run time. This one is
// A2 (a token lock) kept alive by A4's watchdog, with exponential backoff
// between tries: dlock::Lock<RedisBackend, Token, Watchdog, Backoff>. It
// takes and releases a lock while a second client is kept out, then shows
// the rule table: the combinations that cannot work do not compile, and the
// static_assert says why (build_your_own_invalid.cpp is one, checked by the
// compile-fail suite).
//
//   build_your_own [redis://host:port]
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include <boost/hana/size.hpp>

#include <dlock/combinations.hpp>
#include <dlock/dlock.hpp>
#include <support/polling.hpp>
#include "example_redis.hpp"

using namespace std::chrono_literals;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
using dlock::test::scaled;

// The combination: four types. A wrong one would stop the build here.
using MyLock = dlock::Lock<dlock::RedisBackend, o::Token, r::Watchdog, w::Backoff>;

namespace {

long long count(std::chrono::milliseconds d) { return static_cast<long long>(d.count()); }

// One row of the rule table, asked of dlock::rules at compile time.
template <class O, class R, class W>
void rule_row(const char* note) {
  using rules = dlock::rules<O, R, W>;
  std::string name = std::string(O::policy_name) + "/" + R::policy_name + "/" + W::policy_name;
  const char* verdict = rules::ok                     ? "compiles"
                        : !rules::watchdog_has_owner  ? "refused: a watchdog needs an owner-checked ownership"
                        : !rules::lease_present       ? "refused: this ownership needs a lease"
                        : !rules::pubsub_has_publisher ? "refused: pub/sub needs an ownership that publishes"
                                                      : "refused: hand-off and a queueing ownership go together";
  std::printf("  %-24s %s\n", name.c_str(), verdict);
  std::printf("  %-24s   %s\n", "", note);
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend redis(target.url), other_redis(target.url);
  const std::string key = "tour:build";
  MyLock lock(redis, key, {}, r::Watchdog{scaled(3s)}, w::Backoff{5ms, 100ms});
  MyLock other(other_redis, key, {}, r::Watchdog{scaled(3s)}, w::Backoff{5ms, 100ms});

  std::printf("%s, policy by policy:\n", MyLock::combination_name().c_str());
  std::printf("  ownership token:   SET NX PX with a fresh 128-bit random token; release and renewal are\n"
              "                     Lua scripts that act only while the key still holds our token\n");
  std::printf("  renewal watchdog:  a %lld ms lease, renewed every %lld ms while held; the hold counts as\n"
              "                     lost %lld ms before a lease could end unrenewed\n",
              count(lock.renewal().lease()), count(lock.renewal().period()), count(lock.renewal().margin()));
  std::printf("  wait backoff:      after a failed try, sleeps a random time up to %lld ms x 2^tries,\n"
              "                     at most %lld ms\n",
              count(lock.wait_policy().base), count(lock.wait_policy().cap));

  auto hold = lock.acquire();
  auto token = redis.command(dlock::redis::request().push("GET", key));
  auto ttl = redis.command(dlock::redis::request().push("PTTL", key));
  std::printf("client 1: acquired; the key holds token %s, %lld ms to live\n", token.str.c_str(),
              static_cast<long long>(ttl.integer));
  const auto patience = scaled(300ms);
  bool kept_out = !other.try_acquire_for(patience);
  std::printf("client 2: tried for %lld ms with backoff: %s\n", count(patience),
              kept_out ? "not acquired" : "got in: unexpected");
  hold.release();
  std::printf("client 1: released\n");
  auto second = other.try_acquire_for(scaled(2s));
  std::printf("client 2: %s\n", second ? "acquired once client 1 had released" : "still not acquired: unexpected");
  if (second) second->release();
  bool gone = redis.command(dlock::redis::request().push("EXISTS", key)).integer == 0;

  std::printf("\nThe rule table, asked at compile time (dlock::rules; Lock's static_asserts give the reason):\n");
  rule_row<o::Token, r::Watchdog, w::Backoff>("this program's lock");
  rule_row<o::SetNx, r::Watchdog, w::Backoff>(
      "an extend that checks no owner would keep someone else's lock alive");
  rule_row<o::GetSetExpiry, r::Watchdog, w::Spin>("no owner id, and its expiry is in the value, read by every clock");
  rule_row<o::ReentrantHash, r::None, w::Spin>("the hash's scripts set its expiry with every write");
  rule_row<o::NaiveExpiry, r::None, w::TryOnce>("the value is the expiration time");
  rule_row<o::Token, r::FixedLease, w::PubSub>("only the hash's release publishes: nothing would wake the waiter");
  rule_row<o::Token, r::None, w::Spin>("A2n, a flaw kept on purpose: a crashed holder keeps it forever");
  rule_row<o::ReentrantHash, r::Watchdog, w::PubSub>("dlock::Lock<>, Redisson's RLock (A4)");
  namespace hana = boost::hana;
  namespace c = dlock::combinations;
  constexpr std::size_t all = decltype(hana::size(c::ownerships))::value * decltype(hana::size(c::renewals))::value *
                              decltype(hana::size(c::waits))::value;
  constexpr std::size_t valid = decltype(hana::size(c::all()))::value;
  std::printf("build_your_own_invalid.cpp is setnx/watchdog/backoff; the compile-fail suite checks that it\n"
              "fails with the watchdog rule's sentence.\n");
  std::printf("Of the %zu combinations of dlock's policies, %zu compile (dlock::combinations::all()).\n", all, valid);

  std::printf("\nWhat it teaches: a lock design is a choice on four axes, made in one type; the\n"
              "policies are values whose parameters (lease, backoff bounds) are set at run time.\n"
              "A choice that cannot work is refused by the compiler, with a sentence saying why.\n");
  bool works = kept_out && second && gone;
  if (!works) std::printf("unexpected: the lock did not exclude client 2, or did not free on release\n");
  std::printf("verdict: %s %s\n", MyLock::combination_name().c_str(),
              works ? "took and released the lock, keeping a second client out meanwhile" : "did not work");
  return works ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "build_your_own: %s\n", e.what());
  return 2;
}
