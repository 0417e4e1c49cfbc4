// Redis URL parsing (every accepted form, every rejected form with its
// sentence), describe(), and SHA-1 against known vectors and a real server.
#include <catch2/catch.hpp>

#include <sys/un.h>

#include <chrono>
#include <string>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/cluster.hpp>
#include <dlock/redis/redlock.hpp>
#include <dlock/redis/sentinel.hpp>
#include <support/redis_server.hpp>

using dlock::redis::config;
using dlock::redis::parse_url;

TEST_CASE("redis:// URLs", "[url]") {
  auto c = parse_url("redis://127.0.0.1:7000");
  CHECK(c.kind == config::transport::tcp);
  CHECK(c.host == "127.0.0.1");
  CHECK(c.port == 7000);
  CHECK(c.database == 0);
  CHECK(c.user.empty());
  CHECK(c.password.empty());

  c = parse_url("redis://localhost");
  CHECK(c.host == "localhost");
  CHECK(c.port == dlock::redis::default_tcp_port);

  c = parse_url("redis://:s3cret@cache.internal:7001/2");
  CHECK(c.user.empty());
  CHECK(c.password == "s3cret");
  CHECK(c.host == "cache.internal");
  CHECK(c.port == 7001);
  CHECK(c.database == 2);

  c = parse_url("redis://alice:p%40ss%3Aword@h/15");
  CHECK(c.user == "alice");
  CHECK(c.password == "p@ss:word");
  CHECK(c.database == 15);

  c = parse_url("redis://bob@h:1");
  CHECK(c.user == "bob");
  CHECK(c.password.empty());
  CHECK(c.port == 1);

  c = parse_url("redis://[::1]:7002");
  CHECK(c.host == "::1");
  CHECK(c.port == 7002);
  CHECK(parse_url("redis://[::1]").port == dlock::redis::default_tcp_port);
  CHECK(parse_url("redis://h:7/").database == 0);
  CHECK(parse_url("redis://h:65535").port == 65535);
}

TEST_CASE("rediss:// URLs: TLS, with its files and name in the query", "[url][tls]") {
  auto c = parse_url("rediss://:pw@cache.internal:6380/2");
  REQUIRE(c.tls);
  CHECK(c.host == "cache.internal");
  CHECK(c.port == 6380);
  CHECK(c.database == 2);
  CHECK(c.password == "pw");
  CHECK(c.tls->ca_file.empty());  // the system's trust store
  CHECK(c.tls->server_name.empty());  // the host
  CHECK_FALSE(c.tls->insecure_no_verify_for_tests_only);
  CHECK(c.describe() == "rediss://:***@cache.internal:6380/2");

  c = parse_url("rediss://h?ca_file=/etc/r/ca.pem&cert_file=/etc/r/c.pem&key_file=/etc/r/c%20key.pem"
                "&ca_dir=/etc/ssl/certs&server_name=redis.internal");
  REQUIRE(c.tls);
  CHECK(c.port == dlock::redis::default_tcp_port);
  CHECK(c.tls->ca_file == "/etc/r/ca.pem");
  CHECK(c.tls->cert_file == "/etc/r/c.pem");
  CHECK(c.tls->key_file == "/etc/r/c key.pem");
  CHECK(c.tls->ca_dir == "/etc/ssl/certs");
  CHECK(c.tls->server_name == "redis.internal");
  CHECK(parse_url("rediss://[::1]:7000/1?ca_file=/a&").tls->ca_file == "/a");
  CHECK_FALSE(parse_url("redis://h").tls);
}

TEST_CASE("unix:// URLs", "[url]") {
  auto c = parse_url("unix:///tmp/redis.sock");
  CHECK(c.kind == config::transport::unix_socket);
  CHECK(c.path == "/tmp/redis.sock");
  c = parse_url("unix://:pw@/var/run/r.sock?db=3");
  CHECK(c.password == "pw");
  CHECK(c.path == "/var/run/r.sock");
  CHECK(c.database == 3);
}

TEST_CASE("malformed URLs name their bad part, and never the password", "[url]") {
  struct bad {
    const char* url;
    const char* names;
  };
  for (auto [url, names] : {
           bad{"127.0.0.1:7000", "no scheme"},
           bad{"http://h:1", "\"http\""},
           bad{"rediss://h:1?verify=no", "\"verify\""},
           bad{"rediss://h:1?insecure_no_verify_for_tests_only=1", "\"insecure_no_verify_for_tests_only\""},
           bad{"rediss://h:1?ca_file", "\"ca_file\" has no value"},
           bad{"rediss://h:1?ca_file=", "\"ca_file\" is empty"},
           bad{"rediss://h:1?cert_file=/c.pem", "cert_file and key_file go together"},
           bad{"rediss://h:1?key_file=/k.pem", "cert_file and key_file go together"},
           bad{"rediss://h:1#x", "fragment"},
           bad{"rediss://h:1?ca_file=%zz", "percent escape in the query"},
           bad{"rediss://h:0", "\"0\""},
           bad{"redis://h:1?ca_file=/ca.pem", "unknown query parameter \"ca_file\" (a redis:// URL takes acknowledge"},
           bad{"redis://", "host is empty"},
           bad{"redis://:7000", "host is empty"},
           bad{"redis://h:0", "\"0\""},
           bad{"redis://h:65536", "\"65536\""},
           bad{"redis://h:99x", "\"99x\""},
           bad{"redis://h:", "empty port"},
           bad{"redis://h:1/x", "\"x\""},
           bad{"redis://h:1/-1", "\"-1\""},
           bad{"redis://h:1/0/1", "\"/0/1\""},
           bad{"redis://h:1?timeout=3", "\"timeout\""},
           bad{"redis://::1:7000", "more than one ':'"},
           bad{"redis://[::1:7000", "']'"},
           bad{"redis://[::1]x", "\"x\""},
           bad{"redis://ho st:1", "\"ho st\""},
           bad{"redis://u:p%4@h", "percent escape in the password"},
           bad{"redis://u:p%zz@h", "percent escape in the password"},
           bad{"redis://u%zz:p@h", "percent escape in the user name"},
           bad{"unix://relative/path", "absolute"},
           bad{"unix:///tmp/s?foo=1", "\"foo\""},
           bad{"unix:///tmp/s?db=x", "\"x\""},
           bad{"redis://h:1?acknowledge=", "\"acknowledge\" is empty"},
           bad{"redis://h:1?acknowledge=0", "acknowledge=\"0\" is not off, all, if_any or a count"},
           bad{"redis://h:1?acknowledge=-1", "acknowledge=\"-1\""},
           bad{"redis://h:1?acknowledge=some", "acknowledge=\"some\""},
           bad{"redis://h:1?acknowledge=1001", "acknowledge=\"1001\""},
           bad{"redis://h:1?acknowledge=all&acknowledge_timeout=0", "acknowledge_timeout=\"0\""},
           bad{"redis://h:1?acknowledge=all&acknowledge_timeout=1s", "acknowledge_timeout=\"1s\""},
           bad{"redis://h:1?acknowledge_timeout=100", "acknowledge_timeout needs acknowledge="},
           bad{"redis://h:1?acknowledge=off&acknowledge_timeout=100", "nothing to wait for"},
           bad{"redis://h:1?acknowledge=all#x", "a redis:// URL takes no fragment"},
           bad{"unix:///tmp/s?acknowledge=all&x=1", "(a unix:// URL takes acknowledge, acknowledge_timeout, db)"},
       }) {
    std::error_code ec;
    std::string why;
    parse_url(url, ec, &why);
    INFO(url << " -> " << why);
    CHECK(ec == dlock::error::invalid_url);
    CHECK_THAT(why, Catch::Contains(names));
    CHECK_THROWS_AS(parse_url(url), std::system_error);
  }
  std::error_code ec;
  std::string why;
  parse_url("redis://admin:hunter2@h:99x", ec, &why);
  CHECK(ec == dlock::error::invalid_url);
  CHECK_THAT(why, !Catch::Contains("hunter2"));
  try {
    parse_url("redis://admin:hunter2@h:99x");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::invalid_url);
    CHECK_THAT(std::string(e.what()), Catch::Contains("99x") && !Catch::Contains("hunter2"));
  }
}

TEST_CASE("no error message shows any part of the user info", "[url]") {
  // Passwords with '/', '?', '#' or '@' should be percent-encoded, but
  // unencoded ones are still never echoed, whatever else is wrong.
  struct bad {
    std::string url;
    std::vector<std::string> secret;
  };
  for (const auto& [url, secret] : {
           bad{"redis://admin:hun/ter2@h:99x", {"hun", "ter2", "admin"}},
           bad{"redis://admin:hun/ter2@h:1/x", {"hun", "ter2", "admin"}},
           bad{"redis://admin:hun/ter2@", {"hun", "ter2", "admin"}},
           bad{"redis://admin:hu?nt=er2@h:0", {"hu", "nt=er2", "admin"}},
           bad{"redis://admin:hu#nter2@h:0", {"hu", "nter2", "admin"}},
           bad{"redis://admin:p@ss/w0rd@h:0", {"p@ss", "w0rd", "admin"}},
           bad{"redis://admin:sec%zzret@h", {"sec", "zzret", "admin"}},
           bad{"redis://admin:secret%4@h", {"secret", "admin"}},
           bad{"redis://admin:secret@ho st", {"secret", "admin"}},
           bad{"unix://admin:se/cret@/tmp/s?db=x", {"se/cret", "cret", "admin"}},
           bad{"unix://admin:secret@tmp/s", {"secret", "admin"}},
           bad{"unix://admin:se/cret@tmp/s", {"se/", "cret", "admin"}},
           bad{"rediss://admin:secret@h:0", {"secret", "admin"}},
           bad{"rediss://admin:secret@h:1?bad=1", {"secret", "admin"}},
           bad{"http://admin:hun/ter2@h:1", {"hun", "ter2", "admin"}},
       }) {
    std::error_code ec;
    std::string why;
    parse_url(url, ec, &why);
    INFO(url << " -> " << why);
    CHECK(ec == dlock::error::invalid_url);
    for (const auto& s : secret) CHECK_THAT(why, !Catch::Contains(s));
    try {
      parse_url(url);
      FAIL("accepted");
    } catch (const std::system_error& e) {
      for (const auto& s : secret) CHECK_THAT(std::string(e.what()), !Catch::Contains(s));
    }
  }
  // The user info ends at the last '@': a '/' in the password is taken as
  // part of it, not as the start of a path.
  auto c = parse_url("redis://admin:hun/ter2@h:1/3");
  CHECK(c.user == "admin");
  CHECK(c.password == "hun/ter2");
  CHECK(c.host == "h");
  CHECK(c.port == 1);
  CHECK(c.database == 3);
  c = parse_url("unix://admin:se/cret@/tmp/r.sock");
  CHECK(c.password == "se/cret");
  CHECK(c.path == "/tmp/r.sock");
  c = parse_url("unix:///run/redis@main/r.sock");  // an '@' in a path is no user info
  CHECK(c.password.empty());
  CHECK(c.path == "/run/redis@main/r.sock");
}

TEST_CASE("a unix socket path too long for sockaddr_un is rejected", "[url]") {
  std::string path = "/tmp/" + std::string(120, 'd') + "/redis.sock";
  std::error_code ec;
  std::string why;
  parse_url("unix://" + path, ec, &why);
  CHECK(ec == dlock::error::invalid_url);
  auto limit = sizeof(sockaddr_un{}.sun_path) - 1;  // 107 on Linux: the path and its NUL fill it
  CHECK_THAT(why, Catch::Contains(path) && Catch::Contains(std::to_string(limit)));
  CHECK_THROWS_AS(parse_url("unix://" + path), std::system_error);
  std::string longest = "/" + std::string(limit - 1, 'x');
  CHECK(parse_url("unix://" + longest).path == longest);
  CHECK(parse_url("unix://" + longest + "?db=1").path == longest);
  parse_url("unix://" + longest + "x", ec, &why);
  CHECK(ec == dlock::error::invalid_url);
}

TEST_CASE("describe() round-trips and hides the password", "[url]") {
  for (const char* url : {"redis://127.0.0.1:7000", "redis://h:1/4", "redis://[::1]:7002", "unix:///tmp/r.sock",
                          "unix:///tmp/r.sock?db=2", "redis://alice@h:5", "rediss://h:6380/3"}) {
    auto c = parse_url(url);
    auto again = parse_url(c.describe());
    INFO(url << " -> " << c.describe());
    CHECK(again.host == c.host);
    CHECK(again.port == c.port);
    CHECK(again.database == c.database);
    CHECK(again.path == c.path);
    CHECK(again.user == c.user);
    CHECK(again.tls.has_value() == c.tls.has_value());
  }
  auto c = parse_url("redis://alice:hunter2@h:5/1");
  CHECK(c.describe() == "redis://alice:***@h:5/1");
}

TEST_CASE("SHA-1 matches the standard vectors and Redis", "[sha1]") {
  using dlock::redis::sha1_hex;
  CHECK(sha1_hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  CHECK(sha1_hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  CHECK(sha1_hex(std::string(1000000, 'a')) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  // Lengths around the 64-byte block and its 56-byte padding boundary,
  // against what the server computes for the same text.
  dlock::test::redis_server server;
  for (std::size_t n : {1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000}) {
    std::string text = "return '" + std::string(n, 'x') + "'";
    INFO("length " << text.size());
    CHECK(sha1_hex(text) == server.command({"SCRIPT", "LOAD", text}));
  }
}

TEST_CASE("redis-sentinel:// URLs", "[url][sentinel]") {
  using dlock::redis::parse_sentinel_url;
  auto s = parse_sentinel_url("redis-sentinel://10.0.0.1,10.0.0.2:26380,[::1]:7/3#orders");
  REQUIRE(s.sentinels.size() == 3);
  CHECK(s.sentinels[0].host == "10.0.0.1");
  CHECK(s.sentinels[0].port == dlock::redis::default_sentinel_port);
  CHECK(s.sentinels[1].port == 26380);
  CHECK(s.sentinels[2].host == "::1");
  CHECK(s.sentinels[2].port == 7);
  CHECK(s.master.database == 3);
  CHECK(s.master_name == "orders");
  CHECK(s.master.password.empty());
  CHECK(s.describe() == "redis-sentinel://10.0.0.1:26379,10.0.0.2:26380,[::1]:7/3#orders");

  // The credentials are the master's, to the last '@' (a '#' in the
  // password stays in it); the master's name is percent-decoded.
  s = parse_sentinel_url("redis-sentinel://app:p#ss@h1#my%20master");
  CHECK(s.master.user == "app");
  CHECK(s.master.password == "p#ss");
  CHECK(s.master_name == "my master");
  CHECK(s.sentinel_password.empty());
  CHECK(s.describe() == "redis-sentinel://app:***@h1:26379#my master");

  struct bad {
    const char* url;
    const char* names;
  };
  for (auto [url, names] : std::vector<bad>{
           {"redis-sentinel://h1", "no master name"},
           {"redis-sentinel://h1#", "master name after '#' is empty"},
           {"redis-sentinel://#m", "no sentinel host"},
           {"redis-sentinel://h1,,h2#m", "empty sentinel address"},
           {"redis-sentinel://h1:0#m", "port \"0\""},
           {"redis-sentinel://h1/x#m", "database \"x\""},
           {"redis-sentinel://h1?a=b#m", "unknown query parameter \"a\""},
           {"rediss-sentinel://h1?a=b#m", "unknown query parameter \"a\""},
           {"rediss-sentinel://h1?cert_file=/c#m", "cert_file and key_file go together"},
           {"redis://h1#m", "expected redis-sentinel:// or rediss-sentinel://"},
           {"redis-sentinel://:hunter2@h1:99999#m", "port \"99999\""},
       }) {
    CAPTURE(url);
    std::error_code ec;
    std::string why;
    parse_sentinel_url(url, ec, &why);
    CHECK(ec == dlock::error::invalid_url);
    CHECK(why.find(names) != std::string::npos);
    CHECK(why.find("hunter2") == std::string::npos);
  }
  CHECK_THROWS_AS(parse_sentinel_url("redis-sentinel://h1"), std::system_error);
}

TEST_CASE("rediss-sentinel:// and a cluster's rediss:// URLs: TLS to every server", "[url][tls]") {
  auto s = dlock::redis::parse_sentinel_url("rediss-sentinel://:pw@h1,h2:26380/2?ca_file=/ca.pem&server_name=r.internal#orders");
  REQUIRE(s.master.tls);
  REQUIRE(s.sentinel_tls);
  CHECK(s.master.tls->ca_file == "/ca.pem");
  CHECK(s.sentinel_tls->server_name == "r.internal");
  CHECK(s.master.database == 2);
  CHECK(s.master_name == "orders");
  CHECK(s.describe() == "rediss-sentinel://:***@h1:26379,h2:26380/2#orders");
  s = dlock::redis::parse_sentinel_url("rediss-sentinel://h1#m");
  CHECK(s.master.tls);
  CHECK(s.sentinel_tls);
  CHECK_FALSE(dlock::redis::parse_sentinel_url("redis-sentinel://h1#m").sentinel_tls);

  auto c = dlock::redis::parse_cluster_url("rediss://:pw@10.0.0.1:7000,10.0.0.2?ca_file=/ca.pem&cert_file=/c.pem&key_file=/k.pem");
  REQUIRE(c.node.tls);
  REQUIRE(c.seeds.size() == 2);
  CHECK(c.seeds[1].host == "10.0.0.2");
  CHECK(c.node.tls->key_file == "/k.pem");
  CHECK(c.describe() == "rediss://:***@10.0.0.1:7000,10.0.0.2:6379");
  CHECK_FALSE(dlock::redis::parse_cluster_url("redis://h:1").node.tls);
  for (const char* bad : {"rediss://h:1?x=1", "rediss://h:1#f", "redis://h:1?ca_file=/ca.pem", "rediss://h:1/2"}) {
    CAPTURE(bad);
    std::error_code ec;
    dlock::redis::parse_cluster_url(bad, ec);
    CHECK(ec == dlock::error::invalid_url);
  }
}

TEST_CASE("acknowledge= in the query: replica acknowledgement from a URL", "[url][acknowledge]") {
  using dlock::redis::replica_ack;
  CHECK_FALSE(parse_url("redis://h:1").acknowledge);  // the backend's default
  auto c = parse_url("redis://h:1/2?acknowledge=all");
  REQUIRE(c.acknowledge);
  CHECK(c.acknowledge->replicas == replica_ack::all);
  CHECK(c.acknowledge->timeout == std::chrono::milliseconds(1000));
  CHECK_FALSE(c.acknowledge->owner_checked_only);  // said in so many words: strict
  CHECK(c.database == 2);
  c = parse_url("redis://h:1?acknowledge=2&acknowledge_timeout=250");
  REQUIRE(c.acknowledge);
  CHECK(c.acknowledge->replicas == 2);
  CHECK(c.acknowledge->timeout == std::chrono::milliseconds(250));
  CHECK(parse_url("redis://h:1?acknowledge_timeout=250&acknowledge=if_any").acknowledge->replicas ==
        replica_ack::if_any);
  CHECK(parse_url("redis://h:1?acknowledge=off").acknowledge->replicas == replica_ack::none);
  c = parse_url("rediss://h:1?ca_file=/ca.pem&acknowledge=1");
  CHECK(c.tls->ca_file == "/ca.pem");
  CHECK(c.acknowledge->replicas == 1);
  c = parse_url("unix:///tmp/r.sock?db=3&acknowledge=all");
  CHECK(c.database == 3);
  CHECK(c.acknowledge->replicas == replica_ack::all);

  auto s = dlock::redis::parse_sentinel_url("redis-sentinel://:pw@h1,h2/1?acknowledge=off#orders");
  REQUIRE(s.master.acknowledge);
  CHECK(s.master.acknowledge->replicas == replica_ack::none);
  CHECK(s.master.database == 1);
  CHECK(s.master_name == "orders");
  CHECK_FALSE(dlock::redis::parse_sentinel_url("redis-sentinel://h1#m").master.acknowledge);
  auto k = dlock::redis::parse_cluster_url("redis://h:1,h:2?acknowledge=1&acknowledge_timeout=500");
  REQUIRE(k.node.acknowledge);
  CHECK(k.node.acknowledge->replicas == 1);
  CHECK(k.node.acknowledge->timeout == std::chrono::milliseconds(500));
  CHECK(k.seeds.size() == 2);

  std::error_code ec;
  std::string why;
  dlock::redis::parse_sentinel_url("redis-sentinel://h1#m?acknowledge=off", ec, &why);
  CHECK(ec == dlock::error::invalid_url);
  CHECK_THAT(why, Catch::Contains("the query goes before '#'"));
  CHECK(dlock::redis::parse_sentinel_url("redis-sentinel://h1#a%3Fb").master_name == "a?b");
  // TLS settings and acknowledgement together; the last of a parameter given twice counts; values decoded.
  auto t = dlock::redis::parse_sentinel_url("rediss-sentinel://h1?ca_file=/ca.pem&acknowledge=all&acknowledge=%32#m");
  CHECK(t.master.tls->ca_file == "/ca.pem");
  CHECK(t.master.acknowledge->replicas == 2);
  dlock::redis::parse_sentinel_url("redis-sentinel://h1?acknowledge=none#m", ec, &why);
  CHECK(ec == dlock::error::invalid_url);
  CHECK_THAT(why, Catch::Contains("acknowledge=\"none\""));
  // Redlock's nodes are independent masters: no replicas to wait for.
  dlock::redis::parse_redlock_url("redis://h:1,h:2,h:3?acknowledge=all", ec, &why);
  CHECK(ec == dlock::error::invalid_url);
  CHECK_THAT(why, Catch::Contains("unknown query parameter \"acknowledge\" (a Redlock URL takes no query)"));
}
