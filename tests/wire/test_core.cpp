// The connection's sans-I/O core with scripted times and replies, no socket
// and no server: the request queue, the handshake, the health rule, the
// reconnect backoff, the connect errors and the run loop's decisions.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/error.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/request.hpp>

#include "../../src/redis/connect_error.hpp"
#include "../../src/redis/handshake.hpp"
#include "../../src/redis/health_check.hpp"
#include "../../src/redis/reconnect_backoff.hpp"
#include "../../src/redis/reply_stream.hpp"
#include "../../src/redis/request_queue.hpp"
#include "../../src/redis/run_fsm.hpp"

using namespace std::chrono_literals;
using dlock::redis::request;
using dlock::redis::response;
using dlock::redis::value;
using dlock::redis::detail::exec_op;
using dlock::redis::detail::request_queue;
using error_code = boost::system::error_code;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr auto timeout = 5s;
const clock_type::time_point t0 = clock_type::time_point{} + 1h;

// A request that records how it ended.
struct recorder final : exec_op {
  int completions = 0;
  error_code ec;
  response got;

  void complete(error_code e, response r) override {
    ++completions;
    ec = e;
    got = std::move(r);
  }
  bool succeeded() const { return completions == 1 && !ec; }
  bool failed_with(error_code e) const { return completions == 1 && ec == e; }
};

std::shared_ptr<recorder> op_of(const request& req) {
  auto op = std::make_shared<recorder>();
  op->payload = req.payload();
  op->expected = req.size();
  return op;
}

// A request of `commands` GETs of the key `name`.
std::shared_ptr<recorder> op_named(const std::string& name, int commands = 1) {
  request req;
  for (int i = 0; i < commands; ++i) req.push("GET", name);
  return op_of(req);
}

value simple(std::string s) { return value::make_string(std::move(s), dlock::redis::kind::simple_string); }
value failure(std::string s) { return value::make_string(std::move(s), dlock::redis::kind::error); }

}  // namespace

// ---- the request queue ------------------------------------------------------

TEST_CASE("queued requests are coalesced into one write, in order", "[core][queue]") {
  request_queue q(timeout);
  auto a = op_named("a"), b = op_named("b", 2), c = op_named("c");
  for (auto& op : {a, b, c}) CHECK(q.add(op, t0));
  request_queue::batch batch;
  q.take_batch(t0 + 1ms, batch);
  CHECK(batch.payload == a->payload + b->payload + c->payload);
  CHECK(batch.requests == 3);
  CHECK(batch.commands == 4);
  for (auto& op : {a, b, c}) {
    CHECK(op->state == exec_op::stage::written);
    CHECK(op->written_at == t0 + 1ms);
    CHECK(op->completions == 0);
  }
  CHECK_FALSE(q.has_queued());
  // What comes after the write forms the next batch, alone.
  auto d = op_named("d");
  q.add(d, t0 + 2ms);
  q.take_batch(t0 + 3ms, batch);
  CHECK(batch.payload == d->payload);
  CHECK(batch.requests == 1);
}

TEST_CASE("replies are matched in order, and a request of N commands ends with its Nth", "[core][queue]") {
  request_queue q(timeout);
  auto a = op_named("a"), b = op_named("b", 2), c = op_named("c");
  for (auto& op : {a, b, c}) q.add(op, t0);
  request_queue::batch batch;
  q.take_batch(t0, batch);

  auto m = q.take_reply(simple("1"));
  CHECK(m.finished == a);
  CHECK(a->succeeded());
  CHECK(a->got == response{simple("1")});

  m = q.take_reply(simple("2"));
  CHECK_FALSE(m.stray);
  CHECK(m.finished == nullptr);
  CHECK(b->completions == 0);
  m = q.take_reply(failure("ERR 3"));  // an error reply is a reply like any other
  CHECK(m.finished == b);
  CHECK(b->succeeded());
  CHECK(b->got == response{simple("2"), failure("ERR 3")});

  CHECK(q.take_reply(simple("4")).finished == c);
  CHECK(c->got == response{simple("4")});
  CHECK(q.idle());
  // One more reply than was asked for: the stream is out of step.
  CHECK(q.take_reply(simple("5")).stray);
}

TEST_CASE("a write that failed before one byte left is queued again, in order, ahead", "[core][queue]") {
  request_queue q(timeout);
  auto a = op_named("a"), b = op_named("b");
  q.add(a, t0);
  q.add(b, t0);
  request_queue::batch batch;
  q.take_batch(t0, batch);
  auto c = op_named("c");
  q.add(c, t0 + 1ms);  // arrives while the write is under way
  q.unwrite(batch);
  CHECK(a->state == exec_op::stage::queued);
  CHECK(b->state == exec_op::stage::queued);
  // The connection breaks: nothing was written, so nothing fails.
  q.connection_lost();
  for (auto& op : {a, b, c}) CHECK(op->completions == 0);
  q.take_batch(t0 + 2ms, batch);
  CHECK(batch.payload == a->payload + b->payload + c->payload);
}

TEST_CASE("a lost connection fails the written-unanswered with outcome_unknown, not the queued", "[core][queue]") {
  request_queue q(timeout);
  auto answered = op_named("answered"), unanswered = op_named("unanswered", 2), queued = op_named("queued");
  q.add(answered, t0);
  q.add(unanswered, t0);
  request_queue::batch batch;
  q.take_batch(t0, batch);
  q.add(queued, t0 + 1ms);
  q.take_reply(simple("ok"));
  q.take_reply(simple("half of unanswered"));
  q.connection_lost();
  CHECK(answered->succeeded());
  CHECK(unanswered->failed_with(dlock::error::outcome_unknown));
  CHECK(queued->completions == 0);  // waits for the next connection
  q.take_batch(t0 + 2ms, batch);
  CHECK(batch.payload == queued->payload);
  // The new connection's first reply is the queued request's, not the
  // rest of the lost one's.
  CHECK(q.take_reply(simple("fresh")).finished == queued);
  CHECK(queued->got == response{simple("fresh")});
}

TEST_CASE("a request never written fails at its deadline with command_timeout", "[core][queue][timeout]") {
  request_queue q(timeout);
  auto a = op_named("a");
  q.add(a, t0);
  CHECK(q.expire(t0 + timeout - 1ms) == t0 + timeout);  // look again at its deadline
  CHECK(a->completions == 0);
  q.expire(t0 + timeout);
  CHECK(a->failed_with(dlock::error::command_timeout));
  CHECK_FALSE(q.has_queued());
  // Nothing left: look again one timeout from now.
  CHECK(q.expire(t0 + 7s) == t0 + 7s + timeout);
}

TEST_CASE("a request never written reports the last connect error at its deadline", "[core][queue][timeout]") {
  request_queue q(timeout);
  auto a = op_named("a"), b = op_named("b");
  q.add(a, t0);
  q.add(b, t0 + 1s);
  q.connect_failed(dlock::error::connection_refused, false);
  CHECK(a->completions == 0);  // it may yet be written on a reconnect
  q.expire(t0 + timeout);
  CHECK(a->failed_with(dlock::error::connection_refused));
  // After a connection was made, the old error says nothing.
  q.connected();
  q.expire(t0 + 1s + timeout);
  CHECK(b->failed_with(dlock::error::command_timeout));
}

TEST_CASE("a permanent connect error fails queued requests and refuses new ones", "[core][queue]") {
  request_queue q(timeout);
  auto a = op_named("a");
  q.add(a, t0);
  q.connect_failed(dlock::error::auth_failed, false);
  CHECK(a->failed_with(dlock::error::auth_failed));
  auto b = op_named("b");
  CHECK_FALSE(q.add(b, t0));
  CHECK(b->failed_with(dlock::error::auth_failed));
  q.connected();
  auto c = op_named("c");
  CHECK(q.add(c, t0));
  CHECK(c->completions == 0);
}

TEST_CASE("a refused replica fails queued and new requests until the next connect attempt begins", "[core][queue]") {
  request_queue q(timeout);
  auto a = op_named("a");
  q.add(a, t0);
  q.connect_failed(dlock::error::not_master, false, true);
  CHECK(a->failed_with(dlock::error::not_master));
  auto b = op_named("b");
  CHECK_FALSE(q.add(b, t0));  // between attempts: at once, nothing was sent
  CHECK(b->failed_with(dlock::error::not_master));
  CHECK(q.refusing());
  q.connecting();  // the next attempt may find a master (a failback): wait for it
  CHECK_FALSE(q.refusing());
  auto c = op_named("c");
  CHECK(q.add(c, t0));
  CHECK(c->completions == 0);
  q.connect_failed(dlock::error::not_master, false, true);  // a replica still
  CHECK(c->failed_with(dlock::error::not_master));
  q.connecting();
  auto d = op_named("d");
  CHECK(q.add(d, t0));
  q.connected();  // a master this time
  request_queue::batch batch;
  q.take_batch(t0, batch);
  CHECK(batch.requests == 1);
  CHECK(d->completions == 0);
}

TEST_CASE("a permanent connect error goes on refusing when the next attempt begins", "[core][queue]") {
  request_queue q(timeout);
  q.connect_failed(dlock::error::auth_failed, false, true);
  q.connecting();
  CHECK(q.refusing());
  auto a = op_named("a");
  CHECK_FALSE(q.add(a, t0));
  CHECK(a->failed_with(dlock::error::auth_failed));
}

TEST_CASE("a connect that gave up fails queued requests, but not later ones", "[core][queue]") {
  request_queue q(timeout);
  auto a = op_named("a");
  q.add(a, t0);
  q.connect_failed(dlock::error::not_connected, true);
  CHECK(a->failed_with(dlock::error::not_connected));
  auto b = op_named("b");
  CHECK(q.add(b, t0));  // a later attempt may work
  q.expire(t0 + timeout);
  CHECK(b->failed_with(dlock::error::not_connected));
}

TEST_CASE("a written request past its deadline is outcome_unknown, and its late reply is dropped", "[core][queue][timeout]") {
  request_queue q(timeout);
  auto slow = op_named("slow");
  q.add(slow, t0);
  request_queue::batch batch;
  q.take_batch(t0, batch);
  auto next = op_named("next");
  q.add(next, t0 + 1s);
  q.take_batch(t0 + 1s, batch);
  CHECK(q.expire(t0 + timeout - 1ms) == t0 + timeout);
  CHECK(slow->completions == 0);
  CHECK(q.expire(t0 + timeout) == t0 + 1s + timeout);  // next: the other's deadline
  CHECK(slow->failed_with(dlock::error::outcome_unknown));
  CHECK(next->completions == 0);
  // Its reply is still due: the oldest unanswered is the one that timed out.
  CHECK(q.oldest_unanswered() == t0);
  // The late reply is matched to it, and ends nothing more.
  CHECK(q.take_reply(simple("late")).finished == slow);
  CHECK(slow->completions == 1);
  CHECK(q.take_reply(simple("mine")).finished == next);
  CHECK(next->got == response{simple("mine")});
}

TEST_CASE("a cancelled request is taken back only while it is not written", "[core][queue][cancel]") {
  request_queue q(timeout);
  auto a = op_named("a"), b = op_named("b");
  q.add(a, t0);
  q.cancel(a);
  CHECK(a->failed_with(boost::asio::error::operation_aborted));
  CHECK(q.idle());  // taken out, not merely skipped
  q.add(b, t0);
  request_queue::batch batch;
  q.take_batch(t0, batch);
  CHECK(batch.payload == b->payload);  // a is not sent
  q.cancel(b);  // written: it cannot be taken back
  CHECK(b->completions == 0);
  CHECK(q.take_reply(simple("ok")).finished == b);
  CHECK(b->succeeded());
  q.cancel(b);  // ended: nothing happens
  CHECK(b->completions == 1);
}

TEST_CASE("a request cancelled on its way to the queue is dropped when it arrives", "[core][queue][cancel]") {
  request_queue q(timeout);
  auto a = op_named("a");
  q.cancel(a);
  CHECK(a->failed_with(boost::asio::error::operation_aborted));
  CHECK_FALSE(q.add(a, t0));
  CHECK(a->completions == 1);
  CHECK(q.idle());
}

TEST_CASE("after shut_down requests fail with shutting_down; an empty one succeeds at once", "[core][queue]") {
  request_queue q(timeout);
  auto empty = op_of(request());
  CHECK_FALSE(q.add(empty, t0));
  CHECK(empty->succeeded());
  auto written = op_named("written"), queued = op_named("queued");
  q.add(written, t0);
  request_queue::batch batch;
  q.take_batch(t0, batch);
  q.add(queued, t0);
  q.shut_down();
  auto late = op_named("late");
  CHECK_FALSE(q.add(late, t0));
  CHECK(late->failed_with(dlock::error::shutting_down));
  q.fail_all(dlock::error::shutting_down, dlock::error::outcome_unknown);
  CHECK(written->failed_with(dlock::error::outcome_unknown));
  CHECK(queued->failed_with(dlock::error::shutting_down));
}

TEST_CASE("the oldest unanswered request is the first written, whatever was written since", "[core][queue][health]") {
  request_queue q(timeout);
  CHECK_FALSE(q.oldest_unanswered());
  request_queue::batch batch;
  auto a = op_named("a"), b = op_named("b");
  q.add(a, t0);
  q.take_batch(t0 + 1ms, batch);
  q.add(b, t0 + 2s);
  q.take_batch(t0 + 2s, batch);
  CHECK(q.oldest_unanswered() == t0 + 1ms);
  q.take_reply(simple("a"));
  CHECK(q.oldest_unanswered() == t0 + 2s);
}

// ---- the handshake ----------------------------------------------------------

TEST_CASE("the handshake sends AUTH, SELECT, CLIENT SETNAME as configured, then PING", "[core][handshake]") {
  dlock::redis::config cfg;
  cfg.client_name.clear();
  CHECK(dlock::redis::detail::handshake(cfg).commands().payload() == request().push("PING").payload());

  cfg.password = "pw";
  cfg.database = 3;
  cfg.client_name = "me";
  dlock::redis::detail::handshake full(cfg);
  request want;
  want.push("AUTH", "pw").push("SELECT", 3).push("CLIENT", "SETNAME", "me").push("PING");
  CHECK(full.commands().payload() == want.payload());
  CHECK(full.replies_expected() == 4);

  cfg.user = "alice";
  CHECK(dlock::redis::detail::handshake(cfg).commands().payload() ==
        request().push("AUTH", "alice", "pw").push("SELECT", 3).push("CLIENT", "SETNAME", "me").push("PING").payload());
}

namespace {

// A handshake with every step before the PING: AUTH, SELECT, CLIENT SETNAME.
dlock::redis::detail::handshake full_handshake() {
  dlock::redis::config cfg;
  cfg.password = "pw";
  cfg.database = 3;
  cfg.client_name = "me";
  return dlock::redis::detail::handshake(cfg);
}

}  // namespace

TEST_CASE("handshake replies map to auth_failed, select_failed, server_error or success", "[core][handshake]") {
  auto hs = full_handshake();
  const value ok = simple("OK"), pong = simple("PONG");
  using dlock::error;

  CHECK(hs.verdict({ok, ok, ok, pong}) == error_code{});
  CHECK(hs.verdict({failure("WRONGPASS invalid username-password pair"), ok, ok, pong}) == error::auth_failed);
  CHECK(hs.verdict({ok, failure("ERR DB index is out of range"), ok, pong}) == error::select_failed);
  CHECK(hs.verdict({ok, failure("NOAUTH Authentication required."), ok, pong}) == error::auth_failed);
  // An ACL may forbid CLIENT SETNAME: the name is cosmetic.
  CHECK(hs.verdict({ok, ok, failure("NOPERM no permission"), pong}) == error_code{});
  CHECK(hs.verdict({ok, ok, failure("NOAUTH Authentication required."), pong}) == error::auth_failed);
  CHECK(hs.verdict({ok, ok, ok, failure("LOADING Redis is loading the dataset")}) == error::server_error);
  CHECK(hs.verdict({ok, ok, ok, failure("noauth, in lower case")}) == error::auth_failed);
  // The first failure is the one reported.
  CHECK(hs.verdict({failure("WRONGPASS"), failure("ERR DB index is out of range"), ok, pong}) == error::auth_failed);
}

TEST_CASE("handshake replies of a type or value Redis never gives there are unexpected_handshake_reply",
          "[core][handshake]") {
  auto hs = full_handshake();
  const value ok = simple("OK"), pong = simple("PONG");
  using dlock::error;
  auto bulk = [](const char* s) { return value::make_string(s, dlock::redis::kind::bulk_string); };
  CHECK(hs.verdict({value::make_integer(1), ok, ok, pong}) == error::unexpected_handshake_reply);  // AUTH
  CHECK(hs.verdict({bulk("OK"), ok, ok, pong}) == error::unexpected_handshake_reply);
  CHECK(hs.verdict({simple("QUEUED"), ok, ok, pong}) == error::unexpected_handshake_reply);
  CHECK(hs.verdict({ok, value{}, ok, pong}) == error::unexpected_handshake_reply);  // SELECT: nil
  CHECK(hs.verdict({ok, ok, value::make_integer(0), pong}) == error::unexpected_handshake_reply);  // SETNAME
  CHECK(hs.verdict({ok, ok, ok, bulk("PONG")}) == error::unexpected_handshake_reply);
  CHECK(hs.verdict({ok, ok, ok, ok}) == error::unexpected_handshake_reply);  // PING: OK
  CHECK(hs.verdict({ok, ok, ok, simple("pong")}) == error::unexpected_handshake_reply);
  // An error reply still reads as before, and the first failure wins.
  CHECK(hs.verdict({value::make_integer(1), failure("ERR DB index is out of range"), ok, pong}) ==
        error::unexpected_handshake_reply);
  CHECK(hs.verdict({failure("WRONGPASS"), value::make_integer(1), ok, pong}) == error::auth_failed);
}

TEST_CASE("with no password, a server that wants one says NOAUTH to the PING", "[core][handshake]") {
  dlock::redis::config cfg;  // CLIENT SETNAME dlock, then PING
  dlock::redis::detail::handshake hs(cfg);
  REQUIRE(hs.replies_expected() == 2);
  auto noauth = failure("NOAUTH Authentication required.");
  CHECK(hs.verdict({noauth, noauth}) == dlock::error::auth_failed);
  CHECK(hs.verdict({simple("OK"), noauth}) == dlock::error::auth_failed);
  CHECK(hs.verdict({simple("OK"), simple("PONG")}) == error_code{});
}

TEST_CASE("a handshake that needs a master asks ROLE and refuses any other role", "[core][handshake]") {
  dlock::redis::config cfg;
  cfg.client_name.clear();
  cfg.require_master = true;
  dlock::redis::detail::handshake hs(cfg);
  CHECK(hs.commands().payload() == request().push("ROLE").push("PING").payload());
  auto role = [](const char* name) {
    value v;
    v.type = dlock::redis::kind::array;
    v.elements.push_back(simple(name));
    return v;
  };
  const value pong = simple("PONG");
  CHECK(hs.verdict({role("master"), pong}) == error_code{});
  CHECK(hs.verdict({role("slave"), pong}) == dlock::error::not_master);
  CHECK(hs.verdict({role("sentinel"), pong}) == dlock::error::not_master);
  CHECK(hs.verdict({simple("master"), pong}) == dlock::error::unexpected_handshake_reply);  // not ROLE's shape
  CHECK(hs.verdict({failure("NOPERM this user has no permissions to run the 'role' command"), pong}) ==
        dlock::error::not_master);
  CHECK(hs.verdict({failure("NOAUTH Authentication required."), pong}) == dlock::error::auth_failed);
}

// ---- the health rule --------------------------------------------------------

namespace {

using dlock::redis::detail::health;
using dlock::redis::detail::link_activity;

health judge(std::optional<clock_type::time_point> oldest, clock_type::time_point last_byte, clock_type::time_point now,
             bool writes_pending = false, clock_type::duration interval = 1s, clock_type::duration command_timeout = 5s) {
  return dlock::redis::detail::judge_health(interval, command_timeout, link_activity{oldest, writes_pending, last_byte},
                                            now);
}

}  // namespace

TEST_CASE("an idle connection gets a PING; one about to write does not", "[core][health]") {
  CHECK(judge(std::nullopt, t0, t0 + 30s) == health::ping);
  CHECK(judge(std::nullopt, t0, t0 + 30s, true) == health::healthy);
  dlock::redis::detail::health_ping ping;
  CHECK(ping.payload == request().push("PING").payload());
  CHECK(ping.expected == 1);
}

TEST_CASE("a slow command on a healthy server does not make the connection dead", "[core][health]") {
  // A 2 s BLPOP: silent for 2 s, but written less than a timeout ago.
  CHECK(judge(t0, t0, t0 + 2s) == health::healthy);
  CHECK(judge(t0, t0, t0 + 5s - 1ms) == health::healthy);
  // Written long ago, but bytes still arrive (a subscriber's messages, say).
  CHECK(judge(t0, t0 + 9s + 500ms, t0 + 10s) == health::healthy);
  CHECK(judge(t0, t0 + 9s + 1ms, t0 + 10s) == health::healthy);
}

TEST_CASE("a silent server with an overdue request makes the connection dead", "[core][health]") {
  CHECK(judge(t0, t0, t0 + 5s) == health::dead);  // exactly one timeout, silent for longer than an interval
  CHECK(judge(t0, t0 + 9s, t0 + 10s) == health::dead);  // silent for exactly one interval
  // New writes do not hide an old silence: the judgement is on the oldest.
  CHECK(judge(t0, t0 + 1s, t0 + 10s, true) == health::dead);
}

TEST_CASE("the patience is one interval when that is longer than the command timeout", "[core][health]") {
  // Silent since well before the write: only the patience decides.
  auto with_long_interval = [](clock_type::duration since_written) {
    return judge(t0, t0 - 1h, t0 + since_written, false, 10s, 1s);
  };
  CHECK(with_long_interval(9s) == health::healthy);
  CHECK(with_long_interval(10s) == health::dead);
}

// ---- reading replies, reconnecting, connect errors --------------------------

TEST_CASE("the reply stream gives whole replies as their bytes arrive", "[core][stream]") {
  dlock::redis::detail::reply_stream in({});
  CHECK_FALSE(in.next().reply);
  std::string bytes = "+OK\r\n$5\r\nhello\r\n:7\r\n";
  in.append(bytes.data(), 12);  // "+OK\r\n$5\r\nhe"
  CHECK(in.next().reply == simple("OK"));
  CHECK_FALSE(in.next().reply);
  in.append(bytes.data() + 12, bytes.size() - 12);
  CHECK(in.next().reply == value::make_string("hello"));
  CHECK(in.next().reply == value::make_integer(7));
  CHECK_FALSE(in.next().reply);
  std::string junk = "?\r\n";
  in.append(junk.data(), junk.size());
  CHECK(in.next().ec == dlock::error::protocol_error);
  in.reset();
  in.append(bytes.data(), 5);
  CHECK(in.next().reply == simple("OK"));
}

TEST_CASE("reconnect waits double per failure up to the cap, and start over after a connection", "[core][backoff]") {
  dlock::redis::detail::reconnect_backoff backoff(50ms, 300ms);
  CHECK(backoff.after_failure() == 50ms);
  CHECK(backoff.after_failure() == 100ms);
  CHECK(backoff.after_failure() == 200ms);
  CHECK(backoff.after_failure() == 300ms);
  CHECK(backoff.after_failure() == 300ms);
  CHECK(backoff.after_success() == 50ms);
  CHECK(backoff.after_failure() == 50ms);
}

TEST_CASE("connect failures are reported as dlock's connection errors", "[core][connect]") {
  using dlock::redis::detail::to_connect_error;
  namespace aerr = boost::asio::error;
  CHECK(to_connect_error(aerr::connection_refused) == dlock::error::connection_refused);
  CHECK(to_connect_error(make_error_code(boost::system::errc::no_such_file_or_directory)) ==
        dlock::error::connection_refused);
  CHECK(to_connect_error(aerr::host_not_found) == dlock::error::resolve_failed);
  CHECK(to_connect_error(dlock::error::connect_timeout) == dlock::error::connect_timeout);
  CHECK(to_connect_error(dlock::error::auth_failed) == dlock::error::auth_failed);
  CHECK(to_connect_error(dlock::error::select_failed) == dlock::error::select_failed);
  // A hang-up during the handshake, or an error reply to its PING.
  CHECK(to_connect_error(aerr::eof) == dlock::error::not_connected);
  CHECK(to_connect_error(dlock::error::server_error) == dlock::error::not_connected);
  CHECK(dlock::redis::detail::is_permanent(dlock::error::auth_failed));
  CHECK_FALSE(dlock::redis::detail::is_permanent(dlock::error::connection_refused));
  // TLS failures are kept, and name their cause; a certificate problem does
  // not go away by retrying, so queued requests fail at once.
  for (auto e : {dlock::error::tls_handshake_failed, dlock::error::tls_certificate_rejected,
                 dlock::error::tls_hostname_mismatch, dlock::error::tls_client_certificate_rejected}) {
    INFO(make_error_code(e).message());
    CHECK(to_connect_error(e) == e);
    CHECK(std::error_code(e) == dlock::condition::not_sent);
    CHECK(dlock::redis::detail::is_permanent(e) == (e != dlock::error::tls_handshake_failed));
  }
}

TEST_CASE("every dlock error has a sentence of its own", "[core][errors]") {
  std::set<std::string> seen;
  for (int v = static_cast<int>(dlock::error::not_acquired);; ++v) {
    auto text = dlock::error_category().message(v);
    if (text == "unknown dlock error") {
      CHECK(v == static_cast<int>(dlock::error::no_quorum) + 1);  // the last one
      break;
    }
    INFO(v << ": " << text);
    CHECK(seen.insert(text).second);
  }
}

// ---- the run loop's decisions ----------------------------------------------

namespace {

using dlock::redis::detail::run_fsm;
using step = run_fsm::step;

}  // namespace

TEST_CASE("the run loop finds the address, connects, serves, and after a break waits the first wait", "[core][run]") {
  run_fsm fsm(100ms, 2s);
  auto a = fsm.start();
  CHECK(a.next == step::resolve);
  CHECK_FALSE(a.report);
  a = fsm.resolved({});
  CHECK(a.next == step::connect);
  a = fsm.connected({});
  CHECK(a.next == step::serve);
  CHECK(fsm.served_once());
  a = fsm.served();
  CHECK(a.next == step::wait);
  CHECK(a.wait == 100ms);
  CHECK_FALSE(a.report);
  CHECK(fsm.waited().next == step::resolve);
}

TEST_CASE("failed connects are reported as connection errors and back off, up to the cap", "[core][run]") {
  run_fsm fsm(100ms, 350ms);
  fsm.start();
  fsm.resolved({});
  std::vector<std::chrono::milliseconds> waits;
  for (auto ec : {error_code(boost::asio::error::connection_refused), error_code(dlock::error::connect_timeout),
                  error_code(boost::asio::error::eof), error_code(dlock::error::auth_failed)}) {
    auto a = fsm.connected(ec);
    CHECK(a.next == step::wait);
    CHECK_FALSE(a.give_up);
    waits.push_back(a.wait);
    if (ec == boost::asio::error::connection_refused) CHECK(a.report == dlock::error::connection_refused);
    if (ec == dlock::error::connect_timeout) CHECK(a.report == dlock::error::connect_timeout);
    if (ec == boost::asio::error::eof) CHECK(a.report == dlock::error::not_connected);  // a reset mid-handshake
    if (ec == dlock::error::auth_failed) CHECK(a.report == dlock::error::auth_failed);
    CHECK(fsm.waited().next == step::resolve);
    CHECK(fsm.resolved({}).next == step::connect);
  }
  CHECK(waits == std::vector<std::chrono::milliseconds>{100ms, 200ms, 350ms, 350ms});
  // A connection that serves starts the waits over.
  CHECK(fsm.connected({}).next == step::serve);
  CHECK(fsm.served().wait == 100ms);
}

TEST_CASE("an address that cannot be found is a failed connect", "[core][run]") {
  run_fsm fsm(100ms, 2s);
  fsm.start();
  auto a = fsm.resolved(boost::asio::error::host_not_found);
  CHECK(a.next == step::wait);
  CHECK(a.report == dlock::error::resolve_failed);
  CHECK_FALSE(fsm.served_once());
}

TEST_CASE("a step that throws reports not_connected, gives queued requests up, and waits", "[core][run]") {
  run_fsm fsm(100ms, 2s);
  fsm.start();
  auto a = fsm.threw();
  CHECK(a.next == step::wait);
  CHECK(a.report == dlock::error::not_connected);
  CHECK(a.give_up);
  CHECK(a.wait == 100ms);
  CHECK(fsm.threw().wait == 200ms);
}

TEST_CASE("after stop, every step's outcome leads to done, with nothing reported", "[core][run]") {
  auto stopped_at = [](int k) {
    run_fsm fsm(100ms, 2s);
    auto a = fsm.start();
    for (int i = 0; i < k && a.next != step::done; ++i) {
      switch (a.next) {
        case step::resolve: a = fsm.resolved({}); break;
        case step::connect: a = fsm.connected({}); break;
        case step::serve: a = fsm.served(); break;
        case step::wait: a = fsm.waited(); break;
        case step::done: break;
      }
    }
    fsm.request_stop();
    return fsm;
  };
  for (int k = 0; k < 5; ++k) {
    CAPTURE(k);
    auto fsm = stopped_at(k);
    CHECK(fsm.resolved({}).next == step::done);
    CHECK(fsm.connected({}).next == step::done);
    auto failed = fsm.connected(boost::asio::error::connection_refused);
    CHECK(failed.next == step::done);
    CHECK_FALSE(failed.report);  // a connect cut short by stop() is not a failure to report
    CHECK(fsm.served().next == step::done);
    CHECK(fsm.waited().next == step::done);
    CHECK(fsm.threw().next == step::done);
  }
  run_fsm never_started(100ms, 2s);
  never_started.request_stop();
  CHECK(never_started.start().next == step::done);
}
