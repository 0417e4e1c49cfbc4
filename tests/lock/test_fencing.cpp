// Fencing tokens against real servers: each first acquire takes a higher
// number than every earlier hold of the lock, also after the counter sat
// idle long enough to be removed, after a restart with persistence, after a
// hand-off, and after a failover that lost the last increment.
#include "combination_tests.hpp"
#include "backend_instances.hpp"  // their Sentinel and Cluster locks, compiled once

#include <dlock/backend/sentinel.hpp>
#include <support/sentinel_deployment.hpp>

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;

template <class O, class W = dlock::wait::Spin, class B = dlock::RedisBackend>
using Watched = dlock::Lock<B, O, dlock::renewal::Watchdog, W>;

template <class O>
O fenced(std::chrono::milliseconds idle = std::chrono::hours(24)) {
  O o;
  o.fencing = dlock::fencing_tokens{idle};
  return o;
}

std::uint64_t server_micros(dlock::test::redis_server& server) {
  auto out = server.command({"TIME"});  // "seconds\nmicroseconds"
  auto nl = out.find('\n');
  return std::stoull(out.substr(0, nl)) * 1000000 + std::stoull(out.substr(nl + 1));
}

// `threads` threads take lock `L` `rounds` times each and note the token
// of each hold while they hold it: in the order of the holds.
template <class L>
std::vector<std::uint64_t> tokens_in_hold_order(L& lock, int threads, int rounds) {
  std::mutex m;
  std::vector<std::uint64_t> seen;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        auto hold = lock.acquire();
        {
          std::lock_guard g(m);
          seen.push_back(hold.fencing_token().value_or(0));
        }
        hold.release();
      }
    });
  for (auto& t : pool) t.join();
  return seen;
}

bool strictly_increasing(const std::vector<std::uint64_t>& v) {
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] <= v[i - 1]) return false;
  return !v.empty() && v.front() > 0;
}

}  // namespace

TEST_CASE("fencing is off unless asked for, and a bad idle time is refused", "[lock][fencing]") {
  dlock::test::private_redis redis;
  Watched<dlock::ownership::Token> plain(redis.backend, "plain");
  auto hold = plain.acquire();
  CHECK_FALSE(hold.fencing_token());
  hold.release();
  CHECK(redis.server.command({"EXISTS", "{plain}:fence"}) == "0");
  try {
    Watched<dlock::ownership::Token> bad(redis.backend, "bad", fenced<dlock::ownership::Token>(0ms));
    FAIL("constructed");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::invalid_argument);
  }
}

TEMPLATE_TEST_CASE("fencing tokens grow with every hold, under contention", "[lock][fencing]",
                   (Watched<dlock::ownership::Token>), (Watched<dlock::ownership::ReentrantHash>),
                   (Watched<dlock::ownership::Queue, dlock::wait::HandOff>), (Watched<dlock::ownership::Semaphore>),
                   (Watched<dlock::ownership::ReadWrite>)) {
  dlock::test::private_redis redis;
  using O = typename TestType::ownership_type;
  TestType lock(redis.backend, "grows", fenced<O>(), dlock::renewal::Watchdog{scaled(10s)});
  auto seen = tokens_in_hold_order(lock, 4, 15);
  INFO("first " << seen.front() << ", last " << seen.back());
  CHECK(seen.size() == 60);
  CHECK(strictly_increasing(seen));
  // The counter lives on (with its idle expiry), in the lock's slot.
  auto pttl = std::stoll(redis.server.command({"PTTL", "{grows}:fence"}));
  CHECK(pttl > 0);
  CHECK(pttl <= std::chrono::milliseconds(std::chrono::hours(24)).count());
}

TEST_CASE("a reentrant hold keeps the token of its first acquire", "[lock][fencing]") {
  dlock::test::private_redis redis;
  using L = Watched<dlock::ownership::ReentrantHash>;
  L first(redis.backend, "again", fenced<dlock::ownership::ReentrantHash>());
  L second(redis.backend, "again", fenced<dlock::ownership::ReentrantHash>());  // the same owner: this thread
  auto outer = first.acquire();
  auto inner = first.acquire();
  auto other = second.acquire();
  REQUIRE(outer.fencing_token());
  CHECK(inner.fencing_token() == outer.fencing_token());
  CHECK(other.fencing_token() == outer.fencing_token());
  other.release();
  inner.release();
  outer.release();
  auto next = first.acquire();
  CHECK(*next.fencing_token() > *outer.fencing_token());
}

TEST_CASE("a read-write lock's readers and writers take tokens from one counter", "[lock][fencing][read_write]") {
  dlock::test::private_redis redis;
  using L = Watched<dlock::ownership::ReadWrite>;
  L lock(redis.backend, "rw", fenced<dlock::ownership::ReadWrite>());
  L same_owner(redis.backend, "rw", fenced<dlock::ownership::ReadWrite>());
  auto on_thread = [](auto f) { return std::async(std::launch::async, std::move(f)).get(); };
  // Two readers at once: each a token of its own, in grant order.
  auto a = lock.acquire_shared();
  auto b = on_thread([&] { return lock.acquire_shared(); });
  REQUIRE(a.fencing_token());
  REQUIRE(b.fencing_token());
  CHECK(*b.fencing_token() > *a.fencing_token());
  // A re-entered read keeps its first token (the same lock object); through
  // another object of the same owner, it takes a fresh one, which still
  // orders after every earlier grant.
  auto a_again = lock.acquire_shared();
  CHECK(a_again.fencing_token() == a.fencing_token());
  auto a_other = same_owner.acquire_shared();
  CHECK(*a_other.fencing_token() > *b.fencing_token());
  a_other.release();
  a_again.release();
  a.release();
  b.release();
  // The writer's token is above every reader's before it; its re-entry
  // (through either object) and its own read (a downgrade) carry it too.
  auto write = lock.acquire();
  REQUIRE(write.fencing_token());
  CHECK(*write.fencing_token() > *a_other.fencing_token());
  auto write_again = same_owner.acquire();
  CHECK(write_again.fencing_token() == write.fencing_token());
  auto downgrade = lock.acquire_shared();
  CHECK(downgrade.fencing_token() == write.fencing_token());
  // A second read while it writes, through the other object (a re-entry
  // there), carries the write's token too: a fresh one would make the
  // resource refuse the writer's own writes.
  auto downgrade_again = same_owner.acquire_shared();
  CHECK(downgrade_again.fencing_token() == write.fencing_token());
  downgrade_again.release();
  write_again.release();
  write.release();
  // Still read-held by the downgrade: a new reader comes after the write.
  auto c = on_thread([&] { return lock.acquire_shared(); });
  CHECK(*c.fencing_token() > *write.fencing_token());
  downgrade.release();
  c.release();
  CHECK(redis.server.command({"EXISTS", "rw"}) == "0");
}

TEST_CASE("a long write keeps the fence counter alive past its idle time", "[lock][fencing][read_write]") {
  // The counter lives `idle` past the last token taken; a write that holds
  // longer re-reads it for its re-entries and reads, and each of those
  // keeps it another `idle`, so they still carry the write's token.
  dlock::test::private_redis redis;
  using L = Watched<dlock::ownership::ReadWrite>;
  const auto idle = scaled(400ms);
  L lock(redis.backend, "long", fenced<dlock::ownership::ReadWrite>(idle));
  auto write = lock.acquire();
  REQUIRE(write.fencing_token());
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(idle * 2 / 3);
    auto read = lock.acquire_shared();
    CHECK(read.fencing_token() == write.fencing_token());
  }
  CHECK(std::stoll(redis.server.command({"PTTL", "{long}:fence"})) > 0);
}

TEST_CASE("a semaphore's permits take tokens in grant order; a permit that lapsed is outnumbered",
          "[lock][fencing][semaphore]") {
  dlock::test::private_redis redis;
  using L = dlock::Lock<dlock::RedisBackend, dlock::ownership::Semaphore, dlock::renewal::FixedLease, dlock::wait::Spin>;
  auto sem = fenced<dlock::ownership::Semaphore>();
  sem.permits = 2;
  L lock(redis.backend, "pool", sem, dlock::renewal::FixedLease{scaled(400ms)}, dlock::wait::Spin{5ms});
  auto on_thread = [](auto f) { return std::async(std::launch::async, std::move(f)).get(); };
  auto first = lock.acquire();
  auto second = on_thread([&] { return lock.acquire(); });
  REQUIRE(first.fencing_token());
  REQUIRE(second.fencing_token());
  CHECK(*second.fencing_token() > *first.fencing_token());
  // Both lapse; two later grants outnumber them: a resource that refuses
  // tokens below the 2nd highest it has seen refuses both old permits.
  std::this_thread::sleep_for(scaled(500ms));
  auto third = on_thread([&] { return lock.acquire(); });
  auto fourth = on_thread([&] { return lock.acquire(); });
  std::vector<std::uint64_t> seen{*first.fencing_token(), *second.fencing_token(), *third.fencing_token(),
                                  *fourth.fencing_token()};
  CHECK(strictly_increasing(seen));
  CHECK(first.lost());
  CHECK(second.lost());
}

TEST_CASE("a lost acquire reply found to have won takes its token: semaphore, read-write shared and exclusive",
          "[lock][fencing]") {
  // The backend gives up on a reply after 300 ms; the server is paused for
  // longer while the acquire is on its way, and runs it afterwards. The
  // win is found (resolve), and its token taken owner-checked (fence_call):
  // the try's own reply, with its token, never reached the client.
  const auto timeout = scaled(300ms);
  dlock::test::private_redis redis(dlock::test::impatient(timeout));
  using Permit = dlock::Lock<dlock::RedisBackend, dlock::ownership::Semaphore, dlock::renewal::FixedLease, dlock::wait::Spin>;
  using RW = dlock::Lock<dlock::RedisBackend, dlock::ownership::ReadWrite, dlock::renewal::FixedLease, dlock::wait::Spin>;
  Permit permit(redis.backend, "limbo:permit", fenced<dlock::ownership::Semaphore>(), dlock::renewal::FixedLease{scaled(30s)},
                dlock::wait::Spin{5ms});
  RW rw(redis.backend, "limbo:rw", fenced<dlock::ownership::ReadWrite>(), dlock::renewal::FixedLease{scaled(30s)},
        dlock::wait::Spin{5ms});
  std::uint64_t last = 0;
  auto check = [&](auto take, const char* what) {
    INFO(what);
    take().release();  // the scripts loaded: a late NOSCRIPT would mean "did not run"
    redis.server.command({"CLIENT", "PAUSE", std::to_string((timeout * 3 / 2).count()), "ALL"});
    auto hold = take();
    REQUIRE(hold.fencing_token());
    CHECK(*hold.fencing_token() > last);
    last = *hold.fencing_token();
    hold.release();
  };
  check([&] { return permit.acquire(); }, "semaphore");
  check([&] { return rw.acquire_shared(); }, "shared");
  check([&] { return rw.acquire(); }, "exclusive");
}

TEST_CASE("a hand-off's grant takes its token when it arrives", "[lock][fencing]") {
  dlock::test::private_redis redis;
  using L = Watched<dlock::ownership::Queue, dlock::wait::HandOff>;
  L lock(redis.backend, "handed", fenced<dlock::ownership::Queue>(), dlock::renewal::Watchdog{scaled(10s)});
  auto first = lock.acquire();
  const auto first_token = *first.fencing_token();
  auto waiter = std::async(std::launch::async, [&] {
    auto h = lock.acquire();
    auto t = h.fencing_token();
    h.release();
    return t;
  });
  // The waiter is in the line before the release hands the lock to it.
  REQUIRE(dlock::test::wait_until([&] { return redis.server.command({"LLEN", "{handed}:queue"}) == "1"; }));
  auto grants_before = dlock::test::command_calls(redis.server, "evalsha");
  first.release();
  auto second = waiter.get();
  REQUIRE(second);
  CHECK(*second > first_token);
  CHECK(dlock::test::command_calls(redis.server, "evalsha") > grants_before);
}

TEST_CASE("fencing tokens keep growing after the counter sat idle and was removed", "[lock][fencing]") {
  dlock::test::private_redis redis;
  Watched<dlock::ownership::Token> lock(redis.backend, "idle", fenced<dlock::ownership::Token>(100ms));
  auto hold = lock.acquire();
  auto before = *hold.fencing_token();
  hold.release();
  REQUIRE(dlock::test::wait_until([&] { return redis.server.command({"EXISTS", "{idle}:fence"}) == "0"; }));
  auto again = lock.acquire();
  CHECK(*again.fencing_token() > before);
}

TEST_CASE("the counter, not the clock, carries a token that ran ahead of the clock", "[lock][fencing]") {
  // With the counter far ahead of the server's clock, the next token is
  // counter + 1; across a restart with persistence the counter survives,
  // so the token after the restart is higher still (the clock alone would
  // give a lower one).
  dlock::test::server_options persistent;
  persistent.extra_args = {"--appendonly", "yes", "--appendfsync", "always"};
  dlock::test::redis_server server(persistent);
  auto ahead = server_micros(server) + 3'600'000'000ULL;  // an hour ahead
  server.command({"SET", "{ahead}:fence", std::to_string(ahead)});
  {
    dlock::RedisBackend backend(server.url());
    Watched<dlock::ownership::Token> lock(backend, "ahead", fenced<dlock::ownership::Token>());
    auto hold = lock.acquire();
    CHECK(*hold.fencing_token() == ahead + 1);
    hold.release();
  }
  server.restart();
  dlock::RedisBackend backend(server.url());
  Watched<dlock::ownership::Token> lock(backend, "ahead", fenced<dlock::ownership::Token>());
  auto hold = lock.acquire();
  CHECK(*hold.fencing_token() == ahead + 2);
}

TEST_CASE("a failover after an increment that did not replicate: the next token is still higher",
          "[lock][fencing][failover]") {
  // The increment that handed A its token dies with the master; the
  // promoted replica's counter is behind it, and its clock (the same
  // machine's) is what keeps B's token above A's. Replica acknowledgement,
  // on by default, would refuse A's write: turned off.
  dlock::test::sentinel_deployment d;
  auto off = dlock::redis::parse_sentinel_url(d.url());
  off.master.acknowledge = dlock::redis::replica_ack{.replicas = dlock::redis::replica_ack::none};
  dlock::SentinelBackend a_side(off);
  dlock::SentinelBackend b_side(off);
  using L = Watched<dlock::ownership::Token, dlock::wait::Spin, dlock::SentinelBackend>;
  L a(a_side, "fenced", fenced<dlock::ownership::Token>(), dlock::renewal::Watchdog{scaled(30s)});
  L b(b_side, "fenced", fenced<dlock::ownership::Token>(), dlock::renewal::Watchdog{scaled(30s)});

  d.hold_replication();
  auto a_hold = a.acquire();
  const auto a_token = *a_hold.fencing_token();
  auto old_port = d.node(0).port();
  d.node(0).kill();
  d.lose_held_replication();
  d.wait_for_new_master(old_port);
  CHECK(d.master().command({"EXISTS", "{fenced}:fence"}) == "0");  // the increment is gone
  std::error_code ec;
  auto b_hold = b.try_acquire_for(scaled(20s), ec);
  REQUIRE(b_hold);
  CHECK(*b_hold->fencing_token() > a_token);
  b_hold->release(ec);
  CHECK_FALSE(ec);
  a_hold.release(ec);
  CHECK(ec == dlock::error::lease_lost);
}

TEST_CASE("with replica acknowledgement, a token is on the replica before it is handed out", "[lock][fencing]") {
  dlock::test::sentinel_deployment d({.replicas = 1, .sentinels = 1, .quorum = 1});
  auto cfg = dlock::redis::parse_sentinel_url(d.url());
  cfg.master.acknowledge = dlock::redis::replica_ack{};
  dlock::SentinelBackend backend(cfg);
  using L = Watched<dlock::ownership::Queue, dlock::wait::HandOff, dlock::SentinelBackend>;
  L lock(backend, "acked", fenced<dlock::ownership::Queue>(), dlock::renewal::Watchdog{scaled(10s)});
  std::atomic<int> behind{0}, holds{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 3; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        auto hold = lock.acquire();
        auto on_replica = std::stoull(d.node(1).command({"GET", "{acked}:fence"}));
        if (on_replica < *hold.fencing_token()) ++behind;
        ++holds;
        hold.release();
      }
    });
  for (auto& t : pool) t.join();
  CHECK(holds == 15);
  CHECK(behind == 0);
}

TEST_CASE("with replica acknowledgement, the counter itself survives a failover: the next token is counter + 1",
          "[lock][fencing][failover]") {
  // The counter is put an hour ahead of the clock, so a token that came
  // from the new master's clock instead of the replicated counter would be
  // lower than A's; with acknowledgement, A's increment is on the replica
  // that Sentinel promotes, and B's token is exactly the next number.
  dlock::test::sentinel_deployment d;
  auto cfg = dlock::redis::parse_sentinel_url(d.url());
  cfg.master.acknowledge = dlock::redis::replica_ack{};
  dlock::SentinelBackend a_side(cfg), b_side(cfg);
  using L = Watched<dlock::ownership::Token, dlock::wait::Spin, dlock::SentinelBackend>;
  L a(a_side, "carried", fenced<dlock::ownership::Token>(), dlock::renewal::Watchdog{scaled(30s)});
  L b(b_side, "carried", fenced<dlock::ownership::Token>(), dlock::renewal::Watchdog{scaled(30s)});
  d.node(0).command({"SET", "{carried}:fence", std::to_string(server_micros(d.node(0)) + 3'600'000'000ULL)});
  auto a_hold = a.acquire();
  const auto a_token = *a_hold.fencing_token();
  std::error_code ec;
  a_hold.release(ec);
  REQUIRE_FALSE(ec);
  auto old_port = d.node(0).port();
  d.node(0).kill();
  d.wait_for_new_master(old_port);
  auto b_hold = b.try_acquire_for(scaled(20s), ec);
  REQUIRE(b_hold);
  CHECK(*b_hold->fencing_token() == a_token + 1);
}
