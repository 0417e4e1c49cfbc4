// TLS (rediss://) against Debian's redis-server on a TLS-only port, with
// certificates the harness makes: each connection kind works over it, and
// each way TLS can fail is a clear error of its own, within the connect
// timeout, never a hang and never "connected".
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>
#include <memory>
#include <string>

#include <dlock/backend/redis.hpp>
#include <dlock/redis/blocking_connection.hpp>
#include <support/fault_proxy.hpp>
#include <support/loopback.hpp>
#include <support/redis_server.hpp>

#include "wire_support.hpp"

using namespace std::chrono_literals;
using dlock::redis::blocking_connection;
using dlock::redis::parse_url;
using dlock::redis::request;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::tls_files;

namespace {

// One set of certificates for the whole test program (openssl takes a
// moment per key).
std::shared_ptr<const tls_files> files() {
  static const auto made = std::make_shared<const tls_files>();
  return made;
}

redis_server tls_server(std::string auth_clients = "no") {
  dlock::test::server_options opts;
  opts.tls = files();
  opts.tls_auth_clients = std::move(auth_clients);
  return redis_server(std::move(opts));
}

// Settings that trust the test CA, with a short connect timeout.
dlock::redis::config tls_config(const redis_server& server) {
  auto cfg = parse_url(server.url());
  REQUIRE(cfg.tls);
  cfg.connect_timeout = scaled(2s);
  return cfg;
}

dlock::redis::config with_client_certificate(dlock::redis::config cfg) {
  cfg.tls->cert_file = files()->client().cert;
  cfg.tls->key_file = files()->client().key;
  return cfg;
}

// How a RedisBackend's first connect fails: its error and its message.
struct refusal {
  std::error_code code;
  std::string text;
};

refusal backend_refusal(const dlock::redis::config& cfg) {
  try {
    dlock::RedisBackend backend(cfg);
  } catch (const std::system_error& e) {
    return {e.code(), e.what()};
  }
  FAIL("the backend connected");
  return {};
}

// How a blocking connection's first command fails.
std::error_code blocking_refusal(const dlock::redis::config& cfg, std::string* why = nullptr) {
  blocking_connection c(cfg);
  auto [ec, r] = c.exec(request().push("PING"));
  if (why) *why = c.last_connect_failure();
  return ec;
}

// PING on each kind of connection of a backend: the shared one, and a
// blocking one (the backend's command()).
void check_both_paths(dlock::RedisBackend& backend) {
  CHECK(dlock::test::shared_command(backend, request().push("PING")).str == "PONG");
  CHECK(backend.command(request().push("PING")).str == "PONG");
}

}  // namespace

TEST_CASE("rediss:// reaches a TLS-only server on the shared, the subscriber and the blocking connections", "[tls]") {
  auto server = tls_server();
  dlock::RedisBackend backend(tls_config(server));
  check_both_paths(backend);
  CHECK(dlock::test::shared_command(backend, request().push("SET", "k", std::string(100000, 'x'))).str == "OK");
  CHECK(backend.command(request().push("STRLEN", "k")).integer == 100000);
  CHECK(backend.command(request().push("GET", "k")).str.size() == 100000);
  // The server says the client is on TLS (CLIENT INFO has no TLS field in
  // 7.0, but a TLS-only server has no other way in).
  CHECK(server.command({"CONFIG", "GET", "port"}) == "port\n0");
}

TEST_CASE("a dropped TLS connection reconnects with a new session", "[tls]") {
  auto server = tls_server();
  dlock::test::io_thread io;
  dlock::redis::connection live(io.ctx.get_executor(), tls_config(server));
  REQUIRE(!dlock::test::first_connect(live).get());
  REQUIRE(!dlock::test::exec_error(live, request().push("PING")).get());
  live.drop_connection();
  CHECK(!dlock::test::exec_error(live, request().push("PING")).get());
  CHECK(live.statistics().connects == 2);
  // The server closes it (a TLS close, then the end of the stream).
  server.command({"CLIENT", "KILL", "TYPE", "normal"});
  CHECK(!dlock::test::exec_error(live, request().push("PING")).get());
  CHECK(live.statistics().connects >= 3);
  live.stop();

  // The blocking connection: the server's close is seen before the next
  // command (check_idle), which then connects again.
  blocking_connection b(tls_config(server));
  REQUIRE(!b.exec(request().push("PING")).first);
  server.command({"CLIENT", "KILL", "TYPE", "normal"});
  CHECK(dlock::test::wait_until([&] { return !b.check_idle(); }, scaled(2s)));
  CHECK(!b.exec(request().push("PING")).first);
  CHECK(b.connects() == 2);
}

TEST_CASE("mutual TLS: a client certificate is accepted, its absence is tls_client_certificate_rejected", "[tls]") {
  auto server = tls_server("yes");
  SECTION("with the client certificate") {
    dlock::RedisBackend backend(with_client_certificate(tls_config(server)));
    check_both_paths(backend);
  }
  SECTION("without one: under TLS 1.3 the refusal arrives after the handshake, and reads as what it is") {
    // The server's alert and its close race the client's first write and
    // read: either may be what the client sees first. Many tries.
    for (int i = 0; i < 20; ++i) {
      auto r = backend_refusal(tls_config(server));
      CHECK(r.code == dlock::error::tls_client_certificate_rejected);
      CHECK(r.code == dlock::condition::not_sent);
      CHECK_THAT(r.text, Catch::Contains("certificate required") || Catch::Contains("this client has none"));
      std::string why;
      CHECK(blocking_refusal(tls_config(server), &why) == dlock::error::tls_client_certificate_rejected);
      CHECK_THAT(why, Catch::Contains("certificate required") || Catch::Contains("this client has none"));
    }
  }
}

TEST_CASE("a server certificate from a CA not trusted is tls_certificate_rejected", "[tls]") {
  auto server = tls_server();
  auto cfg = tls_config(server);
  cfg.tls->ca_file = files()->other_ca();
  auto r = backend_refusal(cfg);
  CHECK(r.code == dlock::error::tls_certificate_rejected);
  // OpenSSL's reason, then the verify result (here: the chain ends in a
  // self-signed CA that is not trusted).
  CHECK_THAT(r.text, Catch::Contains("(certificate verify failed: self-signed certificate in certificate chain)"));
  std::string why;
  CHECK(blocking_refusal(cfg, &why) == dlock::error::tls_certificate_rejected);
  CHECK(why == "certificate verify failed: self-signed certificate in certificate chain");

  SECTION("unless verification is turned off, for tests only") {
    cfg.tls->insecure_no_verify_for_tests_only = true;
    dlock::RedisBackend backend(cfg);
    check_both_paths(backend);
  }
}

TEST_CASE("a certificate for another name is tls_hostname_mismatch, where redis-cli connects", "[tls]") {
  auto server = tls_server();
  SECTION("a server name that the certificate does not carry") {
    auto cfg = tls_config(server);
    cfg.tls->server_name = "elsewhere.example";
    auto r = backend_refusal(cfg);
    CHECK(r.code == dlock::error::tls_hostname_mismatch);
    CHECK_THAT(r.text, Catch::Contains("hostname mismatch"));
    CHECK(blocking_refusal(cfg) == dlock::error::tls_hostname_mismatch);
    cfg.tls->server_name = "localhost";  // the certificate's DNS name
    dlock::RedisBackend backend(cfg);
    check_both_paths(backend);
  }
  SECTION("the server's certificate swapped for one of another name, without a restart") {
    auto cfg = tls_config(server);
    dlock::RedisBackend before(cfg);  // connected with the right certificate
    REQUIRE(server.command({"CONFIG", "SET", "tls-cert-file", files()->wrong_name().cert, "tls-key-file",
                            files()->wrong_name().key}) == "OK");
    // redis-cli checks the chain, not the name: it still connects.
    CHECK(server.command({"PING"}) == "PONG");
    auto r = backend_refusal(cfg);  // to 127.0.0.1: the IP address is checked
    CHECK(r.code == dlock::error::tls_hostname_mismatch);
    CHECK_THAT(r.text, Catch::Contains("IP address mismatch"));
    auto by_name = cfg;
    by_name.host = "localhost";
    CHECK(backend_refusal(by_name).code == dlock::error::tls_hostname_mismatch);
    CHECK(blocking_refusal(by_name) == dlock::error::tls_hostname_mismatch);
    // The connection made before the swap breaks, and cannot come back:
    // requests fail at once with the reason (a permanent connect error).
    before.connection().drop_connection();
    auto ec = dlock::test::exec_error(before.connection(), request().push("PING")).get();
    CHECK(ec == dlock::error::tls_hostname_mismatch);
  }
}

TEST_CASE("TLS to a port that does not speak it fails within the connect timeout", "[tls]") {
  auto cfg = parse_url("rediss://127.0.0.1:1?ca_file=" + files()->ca());
  cfg.connect_timeout = scaled(500ms);
  SECTION("a listener that never answers: the handshake waits for the deadline, and no longer") {
    std::uint16_t port = 0;
    auto silent = dlock::test::detail::listen_on_loopback(port);  // the kernel accepts; nobody reads
    cfg.port = port;
    auto start = std::chrono::steady_clock::now();
    CHECK(backend_refusal(cfg).code == dlock::error::connect_timeout);
    CHECK(blocking_refusal(cfg) == dlock::error::connect_timeout);
    CHECK(std::chrono::steady_clock::now() - start < 2 * cfg.connect_timeout + scaled(2s));
  }
  SECTION("a plain-text Redis port") {
    redis_server plain;
    cfg.port = plain.port();
    // Redis reads the ClientHello as an inline command: it answers an
    // error (which is no TLS record) once a newline byte came, or waits.
    auto code = backend_refusal(cfg).code;
    CHECK((code == dlock::error::tls_handshake_failed || code == dlock::error::connect_timeout));
    auto blocking = blocking_refusal(cfg);
    CHECK((blocking == dlock::error::tls_handshake_failed || blocking == dlock::error::connect_timeout));
  }
}

TEST_CASE("under mutual TLS, a Redis refusal keeps its own error", "[tls]") {
  // The server asks every client for a certificate: a connection that then
  // fails for another reason must not read as a refused certificate.
  dlock::test::server_options opts;
  opts.tls = files();
  opts.tls_auth_clients = "yes";
  opts.password = "right";
  redis_server server(opts);
  auto cfg = with_client_certificate(tls_config(server));
  cfg.password = "wrong";
  CHECK(backend_refusal(cfg).code == dlock::error::auth_failed);
  CHECK(blocking_refusal(cfg) == dlock::error::auth_failed);
  cfg.password = "right";
  cfg.database = 100000;
  CHECK(backend_refusal(cfg).code == dlock::error::select_failed);
}

TEST_CASE("the TLS files are read once: connections made later use what was read", "[tls]") {
  auto server = tls_server();
  auto cfg = tls_config(server);
  const std::string ca = files()->dir() + "/ca-copy.crt";
  std::filesystem::copy_file(files()->ca(), ca, std::filesystem::copy_options::overwrite_existing);
  cfg.tls->ca_file = ca;
  dlock::RedisBackend backend(cfg);
  std::filesystem::remove(ca);  // rotated away, say
  // The blocking pool's first connection, and a reconnect, come after.
  CHECK(backend.command(request().push("PING")).str == "PONG");
  backend.connection().drop_connection();
  CHECK(dlock::test::shared_command(backend, request().push("PING")).str == "PONG");
  // Another backend with the same settings, while this one lives, too.
  dlock::RedisBackend second(cfg);
  CHECK(second.command(request().push("PING")).str == "PONG");
}

TEST_CASE("a server that trickles its TLS handshake is cut off at the connect timeout", "[tls]") {
  std::uint16_t port = 0;
  auto listener = dlock::test::detail::listen_on_loopback(port);
  std::atomic<bool> done{false};
  std::thread trickler([&] {
    // A TLS record header announcing 16 KiB, then one byte every 100 ms:
    // each receive gets a byte well within any socket timeout.
    const std::string header("\x16\x03\x03\x40\x00", 5);
    std::vector<dlock::test::detail::unique_fd> clients;
    while (!done) {
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        clients.emplace_back(fd);
        (void)::send(fd, header.data(), header.size(), MSG_NOSIGNAL);
      }
      for (auto& c : clients) (void)::send(c.get(), "A", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(100ms);
    }
  });
  auto cfg = parse_url("rediss://127.0.0.1:" + std::to_string(port) + "?ca_file=" + files()->ca());
  cfg.connect_timeout = scaled(600ms);
  auto start = std::chrono::steady_clock::now();
  CHECK(blocking_refusal(cfg) == dlock::error::connect_timeout);
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < cfg.connect_timeout + scaled(1s));
  CHECK(backend_refusal(cfg).code == dlock::error::connect_timeout);
  done = true;
  trickler.join();
}

TEST_CASE("a reply trickled over TLS is cut off at the command timeout", "[tls]") {
  // Past the handshake, one SSL_read takes as many receives as the record
  // comes in pieces; each must wait no longer than what is left of the
  // command's time, not the whole socket timeout again.
  auto server = tls_server();
  dlock::test::fault_proxy proxy(server.port());
  auto cfg = tls_config(server);
  cfg.port = proxy.port();
  cfg.command_timeout = scaled(500ms);
  blocking_connection c(cfg);
  REQUIRE(!c.exec(request().push("SET", "k", std::string(200, 'x'))).first);
  // GET's reply is a record of some 230 bytes: 50 ms a byte makes it 11 s.
  proxy.trickle(50ms, dlock::test::fault_proxy::direction::to_client);
  auto start = std::chrono::steady_clock::now();
  auto [ec, r] = c.exec(request().push("GET", "k"));
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK(took >= cfg.command_timeout);
  CHECK(took < cfg.command_timeout + scaled(1s));
}

TEST_CASE("TLS settings that cannot be used are refused by name before anything connects", "[tls]") {
  auto cfg = parse_url("rediss://127.0.0.1:1");
  SECTION("a CA file that is not there") {
    cfg.tls->ca_file = files()->dir() + "/missing.crt";
    try {
      dlock::RedisBackend backend(cfg);
      FAIL("constructed");
    } catch (const std::system_error& e) {
      CHECK(e.code() == dlock::error::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains("missing.crt") && Catch::Contains("No such file"));
    }
    CHECK_THROWS_AS(blocking_connection(cfg), std::system_error);
  }
  SECTION("a key that is not the certificate's") {
    cfg.tls->cert_file = files()->client().cert;
    cfg.tls->key_file = files()->server().key;
    try {
      dlock::RedisBackend backend(cfg);
      FAIL("constructed");
    } catch (const std::system_error& e) {
      CHECK(e.code() == dlock::error::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains("key_file \"" + files()->server().key + "\"") &&
                               Catch::Contains("key values mismatch"));
    }
  }
  SECTION("an encrypted key: refused, never a passphrase prompt") {
    const std::string encrypted = files()->dir() + "/encrypted.key";
    dlock::test::run_program({"openssl", "pkey", "-in", files()->client().key, "-aes256", "-passout", "pass:secret",
                              "-out", encrypted});
    cfg.tls->cert_file = files()->client().cert;
    cfg.tls->key_file = encrypted;
    CHECK_THROWS_WITH(dlock::RedisBackend(cfg), Catch::Contains("cannot use key_file"));
  }
  SECTION("TLS over a unix socket") {
    auto unix_cfg = parse_url("unix:///tmp/dlock-no-such.sock");
    unix_cfg.tls.emplace();
    CHECK_THROWS_WITH(dlock::RedisBackend(unix_cfg), Catch::Contains("unix socket"));
  }
  SECTION("a file that is not a certificate") {
    cfg.tls->ca_file = files()->client().key;
    CHECK_THROWS_WITH(dlock::RedisBackend(cfg), Catch::Contains("cannot load the CA certificates"));
  }
}
