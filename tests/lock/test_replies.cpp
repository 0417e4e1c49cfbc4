// Replies a real Redis never gives, from a scripted fake server on loopback:
// a reply of a type the algorithm does not expect is unexpected_reply (it
// may have run), never "not acquired", "released" or "lost".
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/fake_redis.hpp>
#include <support/polling.hpp>

#include "lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::fake_redis;
using dlock::test::scaled;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;

using TokenLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::TryOnce>;
using HashLock = dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::FixedLease, w::TryOnce>;
using SetNxLock = dlock::Lock<dlock::RedisBackend, o::SetNx, r::None, w::TryOnce>;
using SetNxLeased = dlock::Lock<dlock::RedisBackend, o::SetNx, r::FixedLease, w::TryOnce>;
using GetSetLock = dlock::Lock<dlock::RedisBackend, o::GetSetExpiry, r::FixedLease, w::TryOnce>;
using TokenWatchdog = dlock::Lock<dlock::RedisBackend, o::Token, r::Watchdog, w::TryOnce>;

namespace {

// Raw RESP replies.
const std::string ok = "+OK\r\n", nil = "$-1\r\n";
std::string integer(long long n) { return ":" + std::to_string(n) + "\r\n"; }
std::string bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }

// Answers by command name (and, for EVALSHA, by script): the map's reply,
// or the fake server's default.
struct script {
  std::vector<std::pair<std::string, std::string>> replies;  // name or SHA -> reply

  std::optional<std::string> operator()(const std::vector<std::string>& cmd) const {
    std::string key = cmd.at(0) == "EVALSHA" ? cmd.at(1) : cmd.at(0);
    for (auto& [name, reply] : replies)
      if (name == key) return reply;
    return std::nullopt;
  }
};

template <class L>
std::error_code try_once(L& lock, std::optional<typename L::hold_type>& out) {
  std::error_code ec;
  out = lock.try_acquire_for(0ms, ec);
  return ec;
}

// A lock whose failures in destructors are collected, not printed.
template <class L>
struct collected {
  std::vector<std::error_code> errors;
  void attach(L& lock) {
    lock.set_error_handler([this](std::error_code ec, const std::string&) { errors.push_back(ec); });
  }
};

}  // namespace

TEST_CASE("Token: an integer reply to SET NX is no verdict, and neither is the resolve's", "[replies][token]") {
  fake_redis fake(script{{{"SET", integer(0)}, {"PTTL", integer(100)}, {"GET", integer(5)}}});
  dlock::RedisBackend redis(fake.url());
  TokenLock lock(redis, "k", {}, r::FixedLease{scaled(10s)});
  std::optional<TokenLock::hold_type> hold;
  CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
  CHECK(fake.count("GET") == 1);  // it asked whether its token is there

  // When the resolve reads nil, the try is known to have lost.
  fake.set_responder(script{{{"SET", integer(0)}, {"PTTL", integer(100)}, {"GET", nil}}});
  CHECK(try_once(lock, hold) == dlock::error::not_acquired);
  // A nil SET with a PTTL that is not an integer is no verdict either; here
  // the resolve answers a status instead of the key's value.
  fake.set_responder(script{{{"SET", nil}, {"PTTL", ok}, {"GET", ok}}});
  CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
  // ... and here it proves the key is someone else's: the try lost.
  fake.set_responder(script{{{"SET", nil}, {"PTTL", ok}, {"GET", bulk("someone-else")}}});
  CHECK(try_once(lock, hold) == dlock::error::not_acquired);
}

TEST_CASE("Token: +OK to the release script is not lease_lost", "[replies][token]") {
  fake_redis fake(script{{{"SET", ok}, {"PTTL", integer(10000)}, {o::Token::release_script().sha1(), ok}}});
  dlock::RedisBackend redis(fake.url());
  TokenLock lock(redis, "k", {}, r::FixedLease{scaled(10s)});
  collected<TokenLock> sink;
  sink.attach(lock);
  auto hold = lock.acquire();
  std::error_code ec;
  hold.release(ec);
  CHECK(ec == dlock::error::unexpected_reply);
  CHECK(hold.owns_lock());  // it may not have run: still releasable
  fake.set_responder(script{{{o::Token::release_script().sha1(), integer(1)}}});
  hold.release(ec);
  CHECK(ec == std::error_code{});
  CHECK(sink.errors.empty());
}

TEST_CASE("ReentrantHash: replies of the wrong type to acquire, resolve and release", "[replies][hash]") {
  const auto& acquire = o::ReentrantHash::acquire_script().sha1();
  const auto& release = o::ReentrantHash::release_script().sha1();
  const auto& resolve = o::ReentrantHash::resolve_script().sha1();
  fake_redis fake(script{{{acquire, ok}, {resolve, ok}}});
  dlock::RedisBackend redis(fake.url());
  HashLock lock(redis, "k", {}, r::FixedLease{scaled(10s)});
  std::optional<HashLock::hold_type> hold;
  CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
  auto asked = 0;  // it asked for its win marker
  for (auto& c : fake.commands()) asked += c.size() > 1 && c[0] == "EVALSHA" && c[1] == resolve;
  CHECK(asked == 1);

  // Acquired (nil); then the release answers "1" as a bulk string, which an
  // integer-only reading took for 0, "still held".
  fake.set_responder(script{{{acquire, nil}, {release, bulk("1")}}});
  collected<HashLock> sink;
  sink.attach(lock);
  REQUIRE(try_once(lock, hold) == std::error_code{});
  std::error_code ec;
  hold->release(ec);
  CHECK(ec == dlock::error::unexpected_reply);
  CHECK(hold->owns_lock());
  fake.set_responder(script{{{release, integer(1)}}});
  hold->release(ec);
  CHECK(ec == std::error_code{});
  CHECK(sink.errors.empty());
}

TEST_CASE("SetNx: +OK to SETNX, PEXPIRE or DEL is no verdict", "[replies][setnx]") {
  fake_redis fake(script{{{"SETNX", ok}}});
  dlock::RedisBackend redis(fake.url());
  SECTION("SETNX") {
    SetNxLock lock(redis, "k");
    std::optional<SetNxLock::hold_type> hold;
    CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
  }
  SECTION("PEXPIRE: the key is given back, since it may have no expiry") {
    fake.set_responder(script{{{"SETNX", integer(1)}, {"PEXPIRE", ok}, {"DEL", integer(1)}}});
    SetNxLeased lock(redis, "k", {}, r::FixedLease{scaled(10s)});
    std::optional<SetNxLeased::hold_type> hold;
    CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
    CHECK(fake.count("DEL") == 1);
  }
  SECTION("DEL") {
    fake.set_responder(script{{{"SETNX", integer(1)}, {"DEL", ok}}});
    SetNxLock lock(redis, "k");
    collected<SetNxLock> sink;
    sink.attach(lock);
    auto hold = lock.acquire();
    std::error_code ec;
    hold.release(ec);
    CHECK(ec == dlock::error::unexpected_reply);
    fake.set_responder(script{{{"DEL", integer(1)}}});
    hold.release(ec);
    CHECK(ec == std::error_code{});
  }
}

TEST_CASE("GetSetExpiry: every step refuses a reply of the wrong type", "[replies][getset]") {
  const std::string past = bulk("1.000000");  // an expiration long gone
  fake_redis fake;
  dlock::RedisBackend redis(fake.url());
  GetSetLock lock(redis, "k", {}, r::FixedLease{scaled(10s)});
  std::optional<GetSetLock::hold_type> hold;
  fake.set_responder(script{{{"SETNX", bulk("1")}}});
  CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
  fake.set_responder(script{{{"SETNX", integer(0)}, {"GET", integer(5)}}});
  CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
  fake.set_responder(script{{{"SETNX", integer(0)}, {"GET", past}, {"GETSET", integer(1)}}});
  CHECK(try_once(lock, hold) == dlock::error::unexpected_reply);
  // The real thing: GETSET reads back the old, expired time, so it won.
  fake.set_responder(script{{{"SETNX", integer(0)}, {"GET", past}, {"GETSET", past}, {"DEL", ok}}});
  REQUIRE(try_once(lock, hold) == std::error_code{});
  std::error_code ec;
  hold->release(ec);
  CHECK(ec == dlock::error::unexpected_reply);
  fake.set_responder(script{{{"DEL", integer(1)}}});
  hold->release(ec);
  CHECK(ec == std::error_code{});
}

TEST_CASE("the watchdog reads +OK to a renewal as unconfirmed, not as lost or renewed", "[replies][watchdog]") {
  const auto lease = scaled(600ms);
  fake_redis fake(script{{{"SET", ok}, {"PTTL", integer(600)}, {o::Token::extend_script().sha1(), ok}}});
  dlock::RedisBackend redis(fake.url());
  TokenWatchdog lock(redis, "k", {}, r::Watchdog{lease});
  auto start = std::chrono::steady_clock::now();
  auto hold = lock.acquire();
  std::atomic<std::chrono::steady_clock::rep> lost_at{0};
  hold.on_lost([&] { lost_at = std::chrono::steady_clock::now().time_since_epoch().count(); });
  REQUIRE(dlock::test::wait_until([&] { return lost_at.load() != 0; }, lease * 3));
  // Renewals were sent and answered, but none confirmed: the loss came from
  // the lease running out (no earlier than the deadline), not from reading
  // "+OK" as a verdict at the first renewal, a third of the way in.
  CHECK(fake.count("EVALSHA") >= 1);
  auto lost = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(lost_at.load()));
  CHECK(lost >= start + lease - r::Watchdog{lease}.margin());
  fake.set_responder(script{{{o::Token::release_script().sha1(), integer(0)}}});
  std::error_code ec;
  hold.release(ec);
  CHECK(ec == dlock::error::lease_lost);
}

namespace {

// A Token whose extend replies read the other way round: +OK means
// extended. (The renewal engine must not read replies itself.)
struct OkMeansExtended : o::Token {
  static dlock::renewal_verdict read_extend(const dlock::redis::value& v) {
    return v.type == dlock::redis::kind::simple_string && v.str == "OK" ? dlock::renewal_verdict::renewed
                                                                        : dlock::renewal_verdict::no_verdict;
  }
};
using OkWatchdog = dlock::Lock<dlock::RedisBackend, OkMeansExtended, r::Watchdog, w::TryOnce>;

}  // namespace

TEST_CASE("an ownership's own reader decides what a renewal reply means", "[replies][watchdog]") {
  const auto lease = scaled(600ms);
  fake_redis fake(script{{{"SET", ok}, {"PTTL", integer(600)}, {o::Token::extend_script().sha1(), ok}}});
  dlock::RedisBackend redis(fake.url());
  OkWatchdog lock(redis, "k", {}, r::Watchdog{lease});
  auto hold = lock.acquire();
  // The same +OK that the usual reader takes for no verdict (the test
  // above) renews this hold: it outlives three leases.
  std::this_thread::sleep_for(lease * 3);
  CHECK(fake.count("EVALSHA") >= 3);
  CHECK_FALSE(hold.lost());
  fake.set_responder(script{{{o::Token::release_script().sha1(), integer(1)}}});
  std::error_code ec;
  hold.release(ec);
  CHECK(!ec);
}

TEST_CASE("the handshake refuses replies Redis never gives, naming the handshake, before any lock command",
          "[replies][handshake]") {
  // Each row: the URL's extra part, and the reply that breaks the handshake.
  struct row {
    const char* what;
    std::string path;  // "" or "/3" (SELECT)
    std::string user;  // "" or ":pw@" (AUTH)
    std::string command;
    std::string reply;
  };
  const std::vector<row> rows = {
      {"AUTH answered with an integer", "", ":pw@", "AUTH", integer(1)},
      {"AUTH answered with a bulk OK", "", ":pw@", "AUTH", bulk("OK")},
      {"SELECT answered with nil", "/3", "", "SELECT", nil},
      {"CLIENT SETNAME answered with an integer", "", "", "CLIENT", integer(0)},
      {"PING answered with a bulk PONG", "", "", "PING", bulk("PONG")},
      {"PING answered with OK", "", "", "PING", ok},
  };
  for (const auto& r : rows) {
    SECTION(r.what) {
      fake_redis fake(script{{{r.command, r.reply}}});
      auto url = "redis://" + r.user + "127.0.0.1:" + std::to_string(fake.port()) + r.path;
      try {
        dlock::RedisBackend redis(url);
        FAIL("the backend connected through a handshake answered with " << r.reply);
      } catch (const std::system_error& e) {
        CHECK(e.code() == dlock::error::unexpected_handshake_reply);
        CHECK(e.code() == dlock::condition::not_sent);
      }
      // Nothing but handshakes reached the server.
      for (const auto& cmd : fake.commands())
        CHECK((cmd.at(0) == "AUTH" || cmd.at(0) == "SELECT" || cmd.at(0) == "CLIENT" || cmd.at(0) == "PING"));
    }
  }
  // The same server answering as Redis does is fine (the control).
  fake_redis fake;
  dlock::RedisBackend redis("redis://:pw@127.0.0.1:" + std::to_string(fake.port()) + "/3");
  CHECK(fake.count("AUTH") >= 1);
  CHECK(fake.count("SELECT") >= 1);
}

TEST_CASE("a long refusal's words are cut at 512 bytes, never inside a character", "[replies][token]") {
  // 4 + 507 bytes, then a two-byte character across the 512th byte.
  const std::string words = "ERR " + std::string(507, 'x') + "\xC3\xA9" + std::string(100, 'y');
  fake_redis fake(script{{{"SET", "-" + words + "\r\n"}, {"PTTL", integer(100)}}});
  dlock::RedisBackend redis(fake.url());
  TokenLock lock(redis, "k", {}, r::FixedLease{scaled(10s)});
  try {
    lock.try_acquire();
    FAIL("a refused SET acquired");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::server_error);
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("(Redis replied: ERR xxx") && Catch::Contains(std::string(20, 'x') + "): "));
    CHECK(what.find('\xC3') == std::string::npos);
    CHECK(what.find("yyyyy") == std::string::npos);
  }
}
