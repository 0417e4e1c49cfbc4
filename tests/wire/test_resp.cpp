// The RESP2 parser on whole, split, hostile and oversized input, and request
// encoding.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/redis/resp.hpp>

using dlock::redis::kind;
using dlock::redis::parser;
using dlock::redis::parser_limits;
using dlock::redis::value;

namespace {

struct outcome {
  std::vector<value> replies;
  std::error_code ec;
  std::size_t left = 0;  // bytes never consumed
};

// Feeds `input` in pieces of at most `chunk` bytes, as a connection would:
// unconsumed bytes are offered again with the next piece.
outcome feed(std::string_view input, std::size_t chunk, parser_limits limits = {}) {
  parser p(limits);
  outcome out;
  std::string buffer;
  for (std::size_t pos = 0; pos < input.size() || !buffer.empty();) {
    std::size_t take = std::min(chunk, input.size() - pos);
    buffer.append(input.substr(pos, take));
    pos += take;
    for (;;) {
      auto res = p.parse(buffer);
      REQUIRE(res.consumed <= buffer.size());
      buffer.erase(0, res.consumed);
      if (res.ec) {
        out.ec = res.ec;
        out.left = buffer.size() + (input.size() - pos);
        return out;
      }
      if (!res.reply) break;
      out.replies.push_back(std::move(*res.reply));
    }
    if (take == 0) break;  // input exhausted and the rest is incomplete
  }
  out.left = buffer.size();
  return out;
}

value bulk(std::string s) { return value::make_string(std::move(s)); }
value simple(std::string s) { return value::make_string(std::move(s), kind::simple_string); }
value array(std::vector<value> els) {
  value v;
  v.type = kind::array;
  v.elements = std::move(els);
  return v;
}

}  // namespace

TEST_CASE("each RESP2 type parses", "[resp]") {
  auto one = [](std::string_view in) {
    auto o = feed(in, in.size());
    REQUIRE(!o.ec);
    REQUIRE(o.replies.size() == 1);
    CHECK(o.left == 0);
    return o.replies[0];
  };
  CHECK(one("+OK\r\n") == simple("OK"));
  auto err = one("-ERR wrong type\r\n");
  CHECK(err.is_error());
  CHECK(err.str == "ERR wrong type");
  CHECK(one(":-42\r\n") == value::make_integer(-42));
  CHECK(one(":9223372036854775807\r\n").integer == INT64_MAX);
  CHECK(one("$3\r\nfoo\r\n") == bulk("foo"));
  CHECK(one("$0\r\n\r\n") == bulk(""));
  CHECK(one("$4\r\na\r\nb\r\n") == bulk("a\r\nb"));  // binary safe
  CHECK(one("$-1\r\n").is_null());
  CHECK(one("*-1\r\n").is_null());
  CHECK(one("*0\r\n") == array({}));
  CHECK(one("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n0\r\n") ==
        array({bulk("message"), bulk("ch"), bulk("0")}));
  CHECK(one("*2\r\n*1\r\n:1\r\n*2\r\n$-1\r\n+x\r\n") ==
        array({array({value::make_integer(1)}), array({value::make_null(), simple("x")})}));
}

TEST_CASE("a reply split at every byte gives the same value", "[resp]") {
  const std::string input = "*4\r\n$5\r\nhello\r\n:12\r\n*2\r\n+OK\r\n$-1\r\n-ERR x\r\n";
  auto whole = feed(input, input.size());
  REQUIRE(whole.replies.size() == 1);
  for (std::size_t chunk = 1; chunk < input.size(); ++chunk) {
    auto split = feed(input, chunk);
    INFO("chunk " << chunk);
    CHECK(!split.ec);
    REQUIRE(split.replies.size() == 1);
    CHECK(split.replies[0] == whole.replies[0]);
  }
  // And at every single split point into two pieces.
  for (std::size_t cut = 1; cut < input.size(); ++cut) {
    parser p;
    std::string buffer = input.substr(0, cut);
    auto r1 = p.parse(buffer);
    CHECK(!r1.reply);
    buffer.erase(0, r1.consumed);
    buffer += input.substr(cut);
    auto r2 = p.parse(buffer);
    INFO("cut " << cut);
    REQUIRE(r2.reply);
    CHECK(*r2.reply == whole.replies[0]);
    CHECK(r2.consumed == buffer.size());
  }
}

TEST_CASE("several replies in one buffer come out one per call", "[resp]") {
  parser p;
  std::string buffer = "+OK\r\n:1\r\n$1\r\nx\r\n";
  auto r1 = p.parse(buffer);
  REQUIRE(r1.reply);
  CHECK(r1.consumed == 5);
  CHECK(*r1.reply == simple("OK"));
  buffer.erase(0, r1.consumed);
  auto r2 = p.parse(buffer);
  CHECK(*r2.reply == value::make_integer(1));
  buffer.erase(0, r2.consumed);
  auto r3 = p.parse(buffer);
  CHECK(*r3.reply == bulk("x"));
  CHECK(r3.consumed == buffer.size());
  auto one_byte = feed("+A\r\n+B\r\n*1\r\n+C\r\n", 1);
  CHECK(one_byte.replies == std::vector<value>{simple("A"), simple("B"), array({simple("C")})});
}

TEST_CASE("a large bulk string arrives in chunks without being buffered twice", "[resp]") {
  std::string payload(1 << 20, 'z');
  payload[100] = '\r';
  std::string input = "$" + std::to_string(payload.size()) + "\r\n" + payload + "\r\n";
  auto o = feed(input, 4096);
  REQUIRE(o.replies.size() == 1);
  CHECK(o.replies[0].str == payload);
  // The parser takes the payload as it comes: a partial bulk is consumed.
  parser p;
  auto r = p.parse(std::string_view(input).substr(0, 10000));
  CHECK(!r.reply);
  CHECK(r.consumed == 10000);
}

TEST_CASE("incomplete input is neither a reply nor an error", "[resp]") {
  for (std::string in : {"+OK", "+OK\r", "$3\r\nfo", "$3\r\nfoo\r", "*2\r\n:1\r\n", "*1\r\n*1\r\n", ":12"}) {
    auto o = feed(in, 1);
    INFO(in);
    CHECK(!o.ec);
    CHECK(o.replies.empty());
  }
}

TEST_CASE("hostile input is a protocol error", "[resp]") {
  for (std::string in : {"?x\r\n", "$-2\r\n", ":abc\r\n", ":\r\n", ":99999999999999999999\r\n", "+OK\n",
                         "+OK\rX\n", "$3\r\nabcd\r\n", "$3\r\nabc\n\n", "*1x\r\n", "*-5\r\n", "\r\n",
                         "*1\r\n!\r\n", "$ 3\r\nabc\r\n", ":1 \r\n"}) {
    for (std::size_t chunk : {std::size_t(1), in.size()}) {
      auto o = feed(in, chunk);
      INFO(dlock::redis::to_string(bulk(in)) << " in pieces of " << chunk);
      CHECK(o.ec == dlock::error::protocol_error);
      CHECK(o.replies.empty());
    }
  }
}

TEST_CASE("the limits hold, before any allocation", "[resp]") {
  parser_limits small;
  small.max_bulk_length = 16;
  small.max_elements = 4;
  small.max_depth = 3;
  small.max_line_length = 32;
  CHECK(feed("$17\r\n", 100, small).ec == dlock::error::reply_too_large);
  CHECK(!feed("$16\r\n0123456789abcdef\r\n", 100, small).ec);
  CHECK(feed("*5\r\n", 100, small).ec == dlock::error::reply_too_large);
  CHECK(!feed("*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n", 100, small).ec);
  CHECK(feed("*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 100, small).ec == dlock::error::nesting_too_deep);
  CHECK(!feed("*1\r\n*1\r\n*1\r\n:1\r\n", 100, small).ec);
  CHECK(feed("+" + std::string(40, 'a') + "\r\n", 100, small).ec == dlock::error::protocol_error);
  // An endless line without CRLF fails once it passes the limit, even in pieces.
  CHECK(feed("+" + std::string(40, 'a'), 1, small).ec == dlock::error::protocol_error);
  // Default limits: a hostile header fails at once.
  CHECK(feed("*2147483647\r\n", 100).ec == dlock::error::reply_too_large);
  CHECK(feed("$9223372036854775807\r\n", 100).ec == dlock::error::reply_too_large);
}

TEST_CASE("one reply's total is bounded, not only each item", "[resp]") {
  // Every item within its own bound, the reply past the total: arrays of
  // arrays (each of 4 elements, 3 deep) hold 4 + 16 + 64 values.
  parser_limits small;
  small.max_elements = 4;
  small.max_reply_values = 50;
  small.max_reply_bytes = 1u << 20;
  std::string deep;
  for (int a = 0; a < 4; ++a) {
    deep += "*4\r\n";
    for (int b = 0; b < 4; ++b) deep += "*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n";
  }
  for (std::size_t chunk : {std::size_t(1), std::size_t(7), deep.size() + 4}) {
    INFO("pieces of " << chunk);
    CHECK(feed("*4\r\n" + deep, chunk, small).ec == dlock::error::reply_too_large);
  }
  small.max_reply_values = 83;  // one short
  CHECK(feed("*4\r\n" + deep, 5, small).ec == dlock::error::reply_too_large);
  small.max_reply_values = 84;  // exactly enough: the leaves and the arrays inside
  auto fits = feed("*4\r\n" + deep, 5, small);
  CHECK(!fits.ec);
  CHECK(fits.replies.size() == 1);
  // Bytes: two bulk strings within their bound, past the reply's total; the
  // second fails at its header, before its payload is read.
  parser_limits bytes;
  bytes.max_bulk_length = 100;
  bytes.max_reply_bytes = 150;
  const std::string half = "$100\r\n" + std::string(100, 'x') + "\r\n";
  CHECK(feed("*2\r\n" + half + half, 3, bytes).ec == dlock::error::reply_too_large);
  CHECK(!feed("*1\r\n" + half, 3, bytes).ec);
  // The totals are per reply: many replies each within them all parse.
  std::string many;
  for (int i = 0; i < 20; ++i) many += "*1\r\n" + half;
  auto all = feed(many, 64, bytes);
  CHECK(!all.ec);
  CHECK(all.replies.size() == 20);
  small.max_reply_values = 5;
  std::string flat;
  for (int i = 0; i < 30; ++i) flat += "*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n";
  CHECK(feed(flat, 9, small).replies.size() == 30);
}

TEST_CASE("a line exactly at the limit passes however the input is cut", "[resp]") {
  // Found by the fuzzer: when a piece ended right after the CR, the whole
  // piece (CR included) was measured against the limit.
  parser_limits small;
  small.max_line_length = 8;
  const std::string line = "+1234567\r\n";  // 8 bytes before the CR
  for (std::size_t chunk = 1; chunk <= line.size(); ++chunk) {
    INFO("pieces of " << chunk);
    auto o = feed(line, chunk, small);
    CHECK(!o.ec);
    REQUIRE(o.replies.size() == 1);
    CHECK(o.replies[0] == simple("1234567"));
  }
  CHECK(feed("+12345678\r\n", 9, small).ec == dlock::error::protocol_error);
}

TEST_CASE("an error sticks until reset", "[resp]") {
  parser p;
  auto bad = p.parse("?\r\n");
  CHECK(bad.ec == dlock::error::protocol_error);
  auto again = p.parse("+OK\r\n");
  CHECK(again.ec == dlock::error::protocol_error);
  CHECK(again.consumed == 0);
  CHECK(!again.reply);
  p.reset();
  auto fine = p.parse("+OK\r\n");
  CHECK(!fine.ec);
  REQUIRE(fine.reply);
  CHECK(fine.reply->str == "OK");
  // reset() also drops a half-parsed reply.
  p.parse("*2\r\n:1\r\n");
  p.reset();
  auto next = p.parse(":7\r\n");
  REQUIRE(next.reply);
  CHECK(*next.reply == value::make_integer(7));
}

TEST_CASE("commands encode as arrays of bulk strings and parse back", "[resp]") {
  std::string out;
  dlock::redis::encode_command(out, {"SET", "k", "v"});
  CHECK(out == "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
  std::string binary("a\r\n\0b", 5);
  std::string out2;
  dlock::redis::encode_command(out2, std::vector<std::string>{"ECHO", binary, ""});
  CHECK(out2 == std::string("*3\r\n$4\r\nECHO\r\n$5\r\na\r\n\0b\r\n$0\r\n\r\n", 31));
  auto o = feed(out2, 3);
  REQUIRE(o.replies.size() == 1);
  CHECK(o.replies[0] == array({bulk("ECHO"), bulk(binary), bulk("")}));
}

TEST_CASE("values render for messages", "[resp]") {
  CHECK(dlock::redis::to_string(array({bulk("message"), value::make_integer(3), value::make_null(),
                                       simple("OK"), value::make_string("NOSCRIPT x", kind::error)})) ==
        "[\"message\",3,nil,OK,(error) NOSCRIPT x]");
  CHECK(dlock::redis::to_string(bulk(std::string("a\"\r\n\x01", 5))) == "\"a\\\"\\r\\n\\x01\"");
}
