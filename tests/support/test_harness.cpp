// The harness itself: servers start on private ports, crash, restart, pause,
// authenticate, replicate, and leave nothing behind; the fault proxy stalls,
// delays, cuts and refuses, and the fake server answers as scripted.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <set>
#include <vector>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fake_redis.hpp"
#include "fault_proxy.hpp"
#include "polling.hpp"
#include "redis_server.hpp"

using namespace std::chrono_literals;
using dlock::test::redis_server;

TEST_CASE("a private server answers on its own port", "[harness]") {
  redis_server a, b;
  CHECK(a.port() != 6379);
  CHECK(a.port() != b.port());
  CHECK(a.command({"SET", "k", "v"}) == "OK");
  CHECK(a.command({"GET", "k"}) == "v");
  CHECK(b.command({"GET", "k"}).empty());
  CHECK(a.url() == "redis://127.0.0.1:" + std::to_string(a.port()));
}

TEST_CASE("kill, start, pause and resume", "[harness]") {
  redis_server s;
  s.command({"SET", "k", "v"});
  auto port = s.port();
  s.kill();
  CHECK_FALSE(s.running());
  CHECK_THROWS(s.command({"PING"}));
  s.start();
  CHECK(s.port() == port);
  CHECK(s.command({"PING"}) == "PONG");
  CHECK(s.command({"GET", "k"}).empty());  // no persistence

  auto state = [&] {
    std::ifstream stat("/proc/" + std::to_string(s.pid()) + "/stat");
    std::string line;
    std::getline(stat, line);
    return line.substr(line.rfind(')') + 2, 1);
  };
  s.pause();
  CHECK(state() == "T");  // stopped: it accepts connections but answers nothing
  s.resume();
  CHECK(state() != "T");
  CHECK(s.command({"PING"}) == "PONG");
}

TEST_CASE("a password server refuses strangers", "[harness]") {
  dlock::test::server_options o;
  o.password = "pw";
  redis_server s(o);
  CHECK(s.command({"PING"}) == "PONG");  // the harness authenticates
  CHECK(s.url() == "redis://:pw@127.0.0.1:" + std::to_string(s.port()));
}

TEST_CASE("a unix socket server and clean-up", "[harness]") {
  pid_t pid;
  std::string path;
  {
    dlock::test::server_options o;
    o.unix_socket = true;
    redis_server s(o);
    pid = s.pid();
    path = s.unix_path();
    CHECK(std::filesystem::exists(path));
  }
  CHECK(::kill(pid, 0) == -1);
  CHECK(errno == ESRCH);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a replica syncs from its master", "[harness][replica]") {
  redis_server master;
  dlock::test::server_options o;
  o.replica_of = master.port();
  redis_server replica(o);
  replica.wait_until_synced();
  master.wait_until_listed(1);
  CHECK_THROWS_WITH(master.wait_until_listed(2, 100ms), "the master did not list 2 replicas acknowledging writes");
  // Without this, a second replica can wait out two 5 s sync delays.
  CHECK(master.command({"CONFIG", "GET", "repl-diskless-sync-delay"}) == "repl-diskless-sync-delay\n0");
  master.command({"SET", "k", "v"});
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = replica.command({"GET", "k"}) == "v";
    if (!seen) std::this_thread::sleep_for(20ms);
  }
  CHECK(seen);
}

TEST_CASE("sentinels find the master", "[harness][sentinel]") {
  redis_server master;
  dlock::test::sentinel_group sentinels("mymaster", master.port());
  CHECK(sentinels.ports().size() == 3);
  CHECK(sentinels.current_master_port() == master.port());
}

namespace {

// Takes the first `count` ports the harness picks, as another process
// would between the harness's check and the server's bind: it listens on
// them until destroyed.
class port_thief {
 public:
  explicit port_thief(int count) : left_(count) {
    dlock::test::set_port_picked_hook([this](std::uint16_t port) {
      if (left_ <= 0) return;
      --left_;
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(port);
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
      REQUIRE(::listen(fd, 1) == 0);
      fds_.push_back(fd);
      taken_.push_back(port);
    });
  }
  ~port_thief() {
    dlock::test::set_port_picked_hook({});
    for (int fd : fds_) ::close(fd);
  }
  const std::vector<std::uint16_t>& taken() const { return taken_; }

 private:
  int left_;
  std::vector<int> fds_;
  std::vector<std::uint16_t> taken_;
};

}  // namespace

TEST_CASE("a server whose port was taken before its bind starts on another", "[harness]") {
  port_thief thief(2);
  redis_server s;
  REQUIRE(thief.taken().size() == 2);
  CHECK(std::find(thief.taken().begin(), thief.taken().end(), s.port()) == thief.taken().end());
  CHECK(s.command({"PING"}) == "PONG");
}

TEST_CASE("a sentinel whose port was taken before its bind starts on another", "[harness][sentinel]") {
  redis_server master;
  port_thief thief(2);  // the first sentinel's port, then the port it is given next
  dlock::test::sentinel_group sentinels("mymaster", master.port());
  REQUIRE(thief.taken().size() == 2);
  for (auto port : sentinels.ports())
    CHECK(std::find(thief.taken().begin(), thief.taken().end(), port) == thief.taken().end());
  CHECK(sentinels.current_master_port() == master.port());
}

TEST_CASE("a three-master cluster comes up", "[harness][cluster]") {
  dlock::test::redis_cluster cluster(3);
  CHECK(cluster.ports().size() == 3);
  CHECK(cluster.node(0).command({"CLUSTER", "KEYSLOT", "foo"}) == "12182");
}

// --- fault_proxy and fake_redis, driven over plain sockets -----------------

namespace {

using dlock::test::fake_redis;
using dlock::test::fault_proxy;

const std::string ping = "*1\r\n$4\r\nPING\r\n";

std::string resp(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

// A blocking loopback client socket with deadline-bounded reads, so a broken
// proxy or fake fails a check instead of hanging the test.
class raw_client {
 public:
  explicit raw_client(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~raw_client() { ::close(fd_); }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  int fd() const { return fd_; }

  void send(const std::string& bytes) {
    REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  }

  // Reads until `total` bytes have arrived (or the peer closes, or `limit`
  // passes) and returns them: a short result means they did not come.
  std::string read_bytes(std::size_t total, std::chrono::milliseconds limit = 5s) {
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (got.size() < total) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, std::min(sizeof buf, total - got.size()), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    return got;
  }

  // Whether the peer closes (EOF or reset) within `limit`, discarding any
  // bytes before that.
  bool closed_within(std::chrono::milliseconds limit = 5s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[512];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n < 0) return false;
    }
  }

 private:
  int fd_;
};

}  // namespace

TEST_CASE("the proxy forwards both ways and counts connections", "[proxy]") {
  redis_server server;
  fault_proxy proxy(server.port());
  CHECK(proxy.port() != 6379);
  CHECK(proxy.port() != server.port());
  CHECK(proxy.url() == "redis://127.0.0.1:" + std::to_string(proxy.port()));
  CHECK(proxy.connections() == 0);
  CHECK(proxy.accepted() == 0);

  raw_client a(proxy.port());
  a.send(ping);
  CHECK(a.read_bytes(7) == "+PONG\r\n");
  a.send(resp({"SET", "k", "through the proxy"}));
  CHECK(a.read_bytes(5) == "+OK\r\n");
  CHECK(server.command({"GET", "k"}) == "through the proxy");
  {
    raw_client b(proxy.port());
    b.send(ping);
    CHECK(b.read_bytes(7) == "+PONG\r\n");
    CHECK(proxy.connections() == 2);  // both answered, so both are paired
    CHECK(proxy.accepted() == 2);
  }
  // b's close reaches the server, whose close comes back: the pair is gone.
  CHECK(dlock::test::wait_until([&] { return proxy.connections() == 1; }));
  CHECK(proxy.accepted() == 2);
  a.send(ping);
  CHECK(a.read_bytes(7) == "+PONG\r\n");
}

TEST_CASE("a stalled proxy holds bytes until resumed", "[proxy]") {
  redis_server server;
  fault_proxy proxy(server.port());
  raw_client c(proxy.port());
  c.send(ping);
  REQUIRE(c.read_bytes(7) == "+PONG\r\n");

  SECTION("both directions") {
    proxy.stall();
    c.send(ping);
    CHECK(c.read_bytes(7, 300ms).empty());
    proxy.resume();
    CHECK(c.read_bytes(7) == "+PONG\r\n");
  }
  SECTION("towards the server: the command does not arrive") {
    proxy.stall(fault_proxy::direction::to_server);
    c.send(resp({"SET", "k", "v"}));
    CHECK(c.read_bytes(5, 300ms).empty());
    CHECK(server.command({"GET", "k"}).empty());
    proxy.resume();
    CHECK(c.read_bytes(5) == "+OK\r\n");
    CHECK(server.command({"GET", "k"}) == "v");
  }
  SECTION("towards the client: the command runs, the reply waits") {
    proxy.stall(fault_proxy::direction::to_client);
    c.send(resp({"SET", "k", "v"}));
    CHECK(dlock::test::wait_until([&] { return server.command({"GET", "k"}) == "v"; }));
    CHECK(c.read_bytes(5, 300ms).empty());
    proxy.resume();
    CHECK(c.read_bytes(5) == "+OK\r\n");
  }
  CHECK(proxy.connections() == 1);  // a stall never closes anything
}

TEST_CASE("a stalled or delayed proxy pushes back and loses nothing", "[proxy]") {
  redis_server server;
  fault_proxy proxy(server.port());
  raw_client c(proxy.port());
  int flags = ::fcntl(c.fd(), F_GETFL);
  REQUIRE(::fcntl(c.fd(), F_SETFL, flags | O_NONBLOCK) == 0);

  std::string pings;
  for (int i = 0; i < 4096; ++i) pings += ping;
  std::size_t written = 0;
  // Writes pings without blocking until the socket takes no more, or
  // `limit` bytes; returns how many it took.
  auto write_until_full = [&](std::size_t limit) {
    std::size_t before = written;
    while (written - before < limit) {
      auto offset = written % pings.size();
      ssize_t n = ::send(c.fd(), pings.data() + offset, pings.size() - offset, MSG_NOSIGNAL);
      if (n < 0) {
        REQUIRE((errno == EAGAIN || errno == EWOULDBLOCK));
        break;
      }
      written += static_cast<std::size_t>(n);
    }
    return written - before;
  };

  // While it forwards nothing the proxy must stop reading (at once, or once
  // a bounded queue is full), so the sender's buffers fill and stay full. A
  // proxy that kept reading would take megabytes more at every round.
  SECTION("stalled") { proxy.stall(fault_proxy::direction::to_server); }
  SECTION("delayed") { proxy.delay(2s, fault_proxy::direction::to_server); }
  constexpr std::size_t lots = std::size_t{64} << 20;
  CHECK(write_until_full(lots) < lots);
  std::this_thread::sleep_for(100ms);
  write_until_full(lots);  // room the kernel or the proxy's bounded queue made meanwhile
  std::size_t later = 0;
  for (int round = 0; round < 2; ++round) {
    std::this_thread::sleep_for(100ms);
    later += write_until_full(lots);
  }
  CHECK(later < (std::size_t{1} << 20));

  proxy.resume();
  proxy.delay(0ms);  // chunks read from now on go at once (behind the delayed ones)
  REQUIRE(::fcntl(c.fd(), F_SETFL, flags) == 0);
  if (auto partial = written % ping.size()) {  // finish the last command, now that there is room
    c.send(ping.substr(partial));
    written += ping.size() - partial;
  }
  std::size_t count = written / ping.size();
  std::string expected;
  for (std::size_t i = 0; i < count; ++i) expected += "+PONG\r\n";
  std::string replies = c.read_bytes(expected.size(), 60s);
  CHECK(replies.size() == expected.size());
  CHECK((replies == expected));  // every byte forwarded, in order (not printed: megabytes)
}

TEST_CASE("a delayed proxy forwards late", "[proxy]") {
  redis_server server;
  fault_proxy proxy(server.port());
  raw_client c(proxy.port());

  SECTION("both directions") { proxy.delay(200ms); }
  SECTION("replies only") { proxy.delay(200ms, fault_proxy::direction::to_client); }
  SECTION("requests only") { proxy.delay(200ms, fault_proxy::direction::to_server); }

  auto start = std::chrono::steady_clock::now();
  c.send(ping);
  c.send(resp({"ECHO", "in order"}));
  CHECK(c.read_bytes(7 + 14) == "+PONG\r\n$8\r\nin order\r\n");
  CHECK(std::chrono::steady_clock::now() - start >= 200ms);  // no upper bound: the machine is noisy

  proxy.delay(0ms);
  c.send(ping);
  CHECK(c.read_bytes(7) == "+PONG\r\n");
}

TEST_CASE("a jittery proxy varies each chunk's wait and keeps the order", "[proxy]") {
  redis_server server;
  fault_proxy proxy(server.port());
  raw_client c(proxy.port());
  proxy.jitter(60ms, fault_proxy::direction::to_client);
  // One command at a time: each round trip draws its own wait in [0, 60] ms.
  std::vector<std::chrono::steady_clock::duration> trips;
  for (int i = 0; i < 30; ++i) {
    auto start = std::chrono::steady_clock::now();
    c.send(ping);
    REQUIRE(c.read_bytes(7) == "+PONG\r\n");
    trips.push_back(std::chrono::steady_clock::now() - start);
  }
  auto [low, high] = std::minmax_element(trips.begin(), trips.end());
  // 30 draws all under 15 ms has odds of about (15/61)^30; without jitter
  // a loopback round trip is well under 1 ms.
  CHECK(*high >= 15ms);
  CHECK(*high - *low >= 10ms);
  // Commands in separate chunks, sent faster than their waits: each reply
  // is held its own random time, yet they arrive in order.
  std::string expected;
  for (int i = 0; i < 20; ++i) {
    auto word = "reply" + std::to_string(100 + i);
    c.send(resp({"ECHO", word}));
    expected += "$8\r\n" + word + "\r\n";
    std::this_thread::sleep_for(2ms);
  }
  CHECK(c.read_bytes(expected.size()) == expected);
  proxy.jitter(0ms);
  c.send(ping);
  CHECK(c.read_bytes(7) == "+PONG\r\n");
}

TEST_CASE("a cut resets every connection, and new ones work", "[proxy]") {
  redis_server server;
  fault_proxy proxy(server.port());
  raw_client a(proxy.port()), b(proxy.port());
  a.send(ping);
  REQUIRE(a.read_bytes(7) == "+PONG\r\n");
  b.send(ping);
  REQUIRE(b.read_bytes(7) == "+PONG\r\n");
  REQUIRE(proxy.connections() == 2);

  proxy.cut();
  CHECK(proxy.connections() == 0);  // cut() returns once they are closed
  CHECK(a.closed_within());
  CHECK(b.closed_within());

  raw_client c(proxy.port());
  c.send(ping);
  CHECK(c.read_bytes(7) == "+PONG\r\n");
  CHECK(proxy.connections() == 1);
  CHECK(proxy.accepted() == 3);
}

TEST_CASE("a refusing proxy closes new connections", "[proxy]") {
  redis_server server;
  fault_proxy proxy(server.port());
  raw_client before(proxy.port());
  before.send(ping);
  REQUIRE(before.read_bytes(7) == "+PONG\r\n");

  proxy.refuse(true);
  {
    raw_client refused(proxy.port());  // the kernel still completes the handshake
    CHECK(refused.closed_within());
  }
  CHECK(proxy.accepted() == 2);
  before.send(ping);  // connections made earlier are left alone
  CHECK(before.read_bytes(7) == "+PONG\r\n");
  CHECK(proxy.connections() == 1);

  proxy.refuse(false);
  raw_client after(proxy.port());
  after.send(ping);
  CHECK(after.read_bytes(7) == "+PONG\r\n");
  CHECK(proxy.accepted() == 3);
  CHECK(proxy.connections() == 2);
}

TEST_CASE("the fake answers pipelined and split commands from its responder", "[fake]") {
  fake_redis fake([](const std::vector<std::string>& cmd) -> std::optional<std::string> {
    if (cmd.size() == 3 && cmd[0] == "SET") return ":1\r\n";  // the wrong type for SET
    return std::nullopt;
  });
  CHECK(fake.port() != 6379);
  CHECK(fake.url() == "redis://127.0.0.1:" + std::to_string(fake.port()));

  raw_client c(fake.port());
  std::string set = resp({"SET", "k", "v"});
  auto split = set.size() - 6;  // inside the last bulk string's header
  c.send(ping + set.substr(0, split));
  CHECK(c.read_bytes(7) == "+PONG\r\n");  // answered before the SET is complete
  c.send(set.substr(split));
  CHECK(c.read_bytes(4) == ":1\r\n");

  using command = std::vector<std::string>;
  CHECK(fake.commands() == std::vector<command>{{"PING"}, {"SET", "k", "v"}});
  CHECK(fake.count("set") == 1);
  CHECK(fake.count("PING") == 1);
  CHECK(fake.count("GET") == 0);
}

TEST_CASE("the fake's default replies", "[fake]") {
  fake_redis fake;
  raw_client a(fake.port()), b(fake.port());
  a.send(resp({"CLIENT", "SETNAME", "x"}) + resp({"select", "0"}) + resp({"AUTH", "pw"}) + resp({"PING", "hi"}));
  CHECK(a.read_bytes(5 + 5 + 5 + 8) == "+OK\r\n+OK\r\n+OK\r\n$2\r\nhi\r\n");
  b.send(resp({"SCRIPT", "LOAD", "abc"}));  // SHA-1("abc"), as a real server answers
  CHECK(b.read_bytes(47) == "$40\r\na9993e364706816aba3e25717850c26c9cd0d89d\r\n");
  std::string error = "-ERR fake_redis: no reply scripted for GET\r\n";
  b.send(resp({"get", "k"}));
  CHECK(b.read_bytes(error.size()) == error);
  CHECK(fake.count("get") == 1);
  CHECK(fake.commands().size() == 6);
}

TEST_CASE("the fake's responder can change while it runs", "[fake]") {
  fake_redis fake([](const std::vector<std::string>&) { return std::optional<std::string>("$-1\r\n"); });
  raw_client c(fake.port());
  c.send(resp({"GET", "k"}));
  CHECK(c.read_bytes(5) == "$-1\r\n");
  fake.set_responder([&fake](const std::vector<std::string>& cmd) -> std::optional<std::string> {
    if (cmd[0] == "GET") return ":" + std::to_string(fake.count("GET")) + "\r\n";  // no deadlock
    if (cmd[0] == "THROW") throw std::runtime_error("boom");
    return std::nullopt;
  });
  c.send(resp({"GET", "k"}) + resp({"THROW"}) + ping);
  std::string expected = ":2\r\n-ERR fake_redis: responder threw: boom\r\n+PONG\r\n";
  CHECK(c.read_bytes(expected.size()) == expected);
}

TEST_CASE("the fake closes connections that send nonsense", "[fake]") {
  fake_redis fake;
  raw_client good(fake.port());

  SECTION("an absurd argument count") {
    raw_client c(fake.port());
    c.send("*99999999999\r\n");
    CHECK(c.closed_within());
  }
  SECTION("an absurd bulk length") {
    raw_client c(fake.port());
    c.send("*1\r\n$9999999999999\r\n");
    CHECK(c.closed_within());
  }
  SECTION("a header that never ends") {
    raw_client c(fake.port());
    c.send("*1\r\n$" + std::string(100, '1'));
    CHECK(c.closed_within());
  }
  SECTION("a bulk string without its CRLF") {
    raw_client c(fake.port());
    c.send("*1\r\n$4\r\nPINGxx");
    CHECK(c.closed_within());
  }
  SECTION("not an array") {
    raw_client c(fake.port());
    c.send("PING\r\n");
    CHECK(c.closed_within());
  }
  good.send(ping);  // other connections carry on
  CHECK(good.read_bytes(7) == "+PONG\r\n");
  CHECK(fake.commands().size() == 1);
}

TEST_CASE("the proxy and the fake close every socket they opened", "[proxy][fake]") {
  auto open_fds = [] {
    auto entries = std::filesystem::directory_iterator("/proc/self/fd");
    return std::distance(std::filesystem::begin(entries), std::filesystem::end(entries));
  };
  auto before = open_fds();
  {
    fake_redis fake;
    fault_proxy proxy(fake.port());
    raw_client a(proxy.port()), b(proxy.port());
    a.send(ping);
    CHECK(a.read_bytes(7) == "+PONG\r\n");
    b.send(ping);
    CHECK(b.read_bytes(7) == "+PONG\r\n");
    proxy.stall();  // connections held open with bytes in flight
    a.send(ping);
    CHECK(open_fds() > before);
  }
  CHECK(open_fds() == before);
}

TEST_CASE("a port is handed out once per process, so servers started side by side never collide", "[harness]") {
  // Before, each pick was an independent random draw: 3000 draws from
  // 12000 ports repeat one almost surely (and three Sentinel deployments
  // started at once did collide once, on a replica's port).
  std::set<std::uint16_t> seen;
  for (int i = 0; i < 3000; ++i) CHECK(seen.insert(dlock::test::free_port()).second);
  // Started side by side, from threads: every one comes up.
  std::vector<std::future<std::uint16_t>> started;
  for (int i = 0; i < 6; ++i)
    started.push_back(std::async(std::launch::async, [] { return dlock::test::redis_server().port(); }));
  std::set<std::uint16_t> ports;
  for (auto& f : started) ports.insert(f.get());
  CHECK(ports.size() == 6);
}

// --- redis_cluster: layout, slot owners, migration and failover -------------

namespace {

using dlock::test::redis_cluster;

std::uint16_t slot_of(redis_cluster& cluster, const std::string& key) {
  auto asked = cluster.masters().front();
  return static_cast<std::uint16_t>(std::stoi(cluster.node(asked).command({"CLUSTER", "KEYSLOT", key})));
}

// What redis-cli prints for a redirection: "MOVED 12182 127.0.0.1:<port>".
std::string redirect(const std::string& kind, std::uint16_t slot, const redis_server& to) {
  return kind + " " + std::to_string(slot) + " 127.0.0.1:" + std::to_string(to.port());
}

std::size_t another_master(redis_cluster& cluster, std::size_t master) {
  for (auto m : cluster.masters())
    if (m != master) return m;
  throw std::runtime_error("no other master");
}

long long seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a cluster with replicas comes up synced, every node agreeing on the layout", "[harness][cluster]") {
  auto start = std::chrono::steady_clock::now();
  redis_cluster cluster({.masters = 3, .replicas_per_master = 1});
  CHECK(seconds_since(start) < 60);  // the constructor's own limit
  REQUIRE(cluster.nodes() == 6);

  auto ports = cluster.ports();
  std::string listed = "redis://";
  for (std::size_t i = 0; i < ports.size(); ++i) listed += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(ports[i]);
  CHECK(cluster.url() == listed);
  CHECK(std::set<std::uint16_t>(ports.begin(), ports.end()).size() == 6);
  CHECK(std::find(ports.begin(), ports.end(), 6379) == ports.end());
  CHECK(cluster.seed_url({2, 0}) ==
        "redis://127.0.0.1:" + std::to_string(ports[2]) + ",127.0.0.1:" + std::to_string(ports[0]));

  auto masters = cluster.masters();
  REQUIRE(masters.size() == 3);
  std::set<std::size_t> replicas;
  for (auto m : masters) {
    auto r = cluster.replica_of(m);
    CHECK(std::find(masters.begin(), masters.end(), r) == masters.end());
    replicas.insert(r);
    auto info = cluster.node(r).command({"INFO", "replication"});  // synced before the constructor returned
    CHECK(info.find("master_link_status:up") != std::string::npos);
    CHECK(info.find("master_port:" + std::to_string(cluster.node(m).port())) != std::string::npos);
  }
  CHECK(replicas.size() == 3);

  for (std::size_t i = 0; i < cluster.nodes(); ++i) {
    INFO("node " << i);
    CHECK(cluster.node_id(i) == cluster.node(i).command({"CLUSTER", "MYID"}));
    auto info = cluster.node(i).command({"CLUSTER", "INFO"});
    CHECK(info.find("cluster_state:ok") != std::string::npos);
    CHECK(info.find("cluster_slots_assigned:16384") != std::string::npos);
    CHECK(info.find("cluster_known_nodes:6") != std::string::npos);
    CHECK(info.find("cluster_size:3") != std::string::npos);
    auto shards = cluster.node(i).command({"CLUSTER", "SHARDS"});  // every node, with its role
    for (std::size_t j = 0; j < cluster.nodes(); ++j) CHECK(shards.find(cluster.node_id(j)) != std::string::npos);
  }
}

TEST_CASE("a cluster with a password puts it in its URLs and migrates with AUTH", "[harness][cluster]") {
  redis_cluster cluster({.password = "s3cret"});
  auto ports = cluster.ports();
  CHECK(cluster.url() == "redis://:s3cret@127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" +
                             std::to_string(ports[1]) + ",127.0.0.1:" + std::to_string(ports[2]));
  CHECK(cluster.seed_url({1}) == "redis://:s3cret@127.0.0.1:" + std::to_string(ports[1]));

  auto slot = slot_of(cluster, "{pw}");
  auto from = cluster.master_of_slot(slot);
  auto to = another_master(cluster, from);
  for (int i = 0; i < 3; ++i) REQUIRE(cluster.node(from).command({"SET", "{pw}" + std::to_string(i), "v"}) == "OK");
  cluster.move_slot(slot, from, to);
  CHECK(cluster.master_of_slot(slot) == to);
  CHECK(cluster.node(to).command({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}) == "3");
  CHECK(cluster.node(to).command({"GET", "{pw}2"}) == "v");
}

TEST_CASE("master_of_slot names the node that takes a key without MOVED", "[harness][cluster]") {
  redis_cluster cluster(3);
  auto masters = cluster.masters();
  REQUIRE(masters.size() == 3);
  std::set<std::size_t> owners;
  for (int i = 0; i < 30; ++i) {
    std::string key = "key:" + std::to_string(i);
    INFO(key);
    auto slot = static_cast<std::uint16_t>(std::stoi(cluster.node(masters[0]).command({"CLUSTER", "KEYSLOT", key})));
    auto owner = cluster.master_of_slot(slot);
    owners.insert(owner);
    CHECK(cluster.node(owner).command({"SET", key, "v"}) == "OK");  // redis-cli without -c: no redirection followed
    for (auto m : masters)
      if (m != owner) CHECK(cluster.node(m).command({"SET", key, "w"}) == redirect("MOVED", slot, cluster.node(owner)));
  }
  CHECK(owners.size() == 3);
  CHECK(cluster.master_of_slot(0) != cluster.master_of_slot(16383));
}

TEST_CASE("a migrated slot takes its keys along, and its old owner answers MOVED", "[harness][cluster]") {
  redis_cluster cluster({.masters = 3, .replicas_per_master = 1});
  auto slot = slot_of(cluster, "{mig}");
  auto s = std::to_string(slot);
  auto from = cluster.master_of_slot(slot);
  auto to = another_master(cluster, from);
  for (int i = 0; i < 25; ++i)
    REQUIRE(cluster.node(from).command({"SET", "{mig}" + std::to_string(i), "v" + std::to_string(i)}) == "OK");

  auto start = std::chrono::steady_clock::now();
  cluster.begin_migration(slot, from, to);
  CHECK(cluster.migrate_keys(slot, from, to) == 25);
  CHECK(cluster.node(from).command({"CLUSTER", "COUNTKEYSINSLOT", s}) == "0");
  CHECK(cluster.node(to).command({"CLUSTER", "COUNTKEYSINSLOT", s}) == "25");
  cluster.finish_migration(slot, to);  // waits for every node, replicas too
  CHECK(seconds_since(start) < 20);

  CHECK(cluster.master_of_slot(slot) == to);
  for (int i = 0; i < 25; ++i) CHECK(cluster.node(to).command({"GET", "{mig}" + std::to_string(i)}) == "v" + std::to_string(i));
  CHECK(cluster.node(from).command({"GET", "{mig}0"}) == redirect("MOVED", slot, cluster.node(to)));
  CHECK(cluster.node(cluster.replica_of(to)).command({"GET", "{mig}0"}) == redirect("MOVED", slot, cluster.node(to)));
  for (std::size_t i = 0; i < cluster.nodes(); ++i)  // no node is left importing or migrating it
    CHECK(cluster.node(i).command({"CLUSTER", "NODES"}).find("[" + s + "-") == std::string::npos);

  // And back again in one step; an empty slot moves too.
  cluster.move_slot(slot, to, from);
  CHECK(cluster.master_of_slot(slot) == from);
  CHECK(cluster.node(from).command({"GET", "{mig}24"}) == "v24");
  auto empty = slot_of(cluster, "{nothing here}");
  auto owner = cluster.master_of_slot(empty);
  cluster.move_slot(empty, owner, another_master(cluster, owner));
  CHECK(cluster.master_of_slot(empty) == another_master(cluster, owner));
  cluster.wait_ok(5s);
}

TEST_CASE("mid-migration the old owner answers ASK for keys it no longer holds", "[harness][cluster]") {
  redis_cluster cluster(3);
  auto slot = slot_of(cluster, "{ask}");
  auto s = std::to_string(slot);
  auto from = cluster.master_of_slot(slot);
  auto to = another_master(cluster, from);
  REQUIRE(cluster.node(from).command({"SET", "{ask}moved", "1"}) == "OK");
  REQUIRE(cluster.node(from).command({"SET", "{ask}stays", "2"}) == "OK");

  cluster.begin_migration(slot, from, to);
  CHECK(cluster.node(from).command({"CLUSTER", "NODES"}).find("[" + s + "->-" + cluster.node_id(to) + "]") !=
        std::string::npos);
  CHECK(cluster.node(to).command({"CLUSTER", "NODES"}).find("[" + s + "-<-" + cluster.node_id(from) + "]") !=
        std::string::npos);
  CHECK(cluster.migrate_key("{ask}moved", from, to));
  CHECK_FALSE(cluster.migrate_key("{ask}missing", from, to));

  auto ask = redirect("ASK", slot, cluster.node(to));
  CHECK(cluster.node(from).command({"GET", "{ask}moved"}) == ask);
  CHECK(cluster.node(from).command({"GET", "{ask}missing"}) == ask);
  CHECK(cluster.node(from).command({"SET", "{ask}new", "3"}) == ask);  // a new key goes to the importing node
  CHECK(cluster.node(from).command({"GET", "{ask}stays"}) == "2");     // a key not moved yet is served
  CHECK(cluster.master_of_slot(slot) == from);                        // still, until finish_migration
  // The importing node redirects back, unless the client says ASKING first.
  CHECK(cluster.node(to).command({"GET", "{ask}moved"}) == redirect("MOVED", slot, cluster.node(from)));
  {
    raw_client c(cluster.node(to).port());
    c.send(resp({"ASKING"}) + resp({"GET", "{ask}moved"}));
    CHECK(c.read_bytes(5 + 7) == "+OK\r\n$1\r\n1\r\n");
  }

  CHECK(cluster.migrate_keys(slot, from, to) == 1);
  cluster.finish_migration(slot, to);
  CHECK(cluster.node(to).command({"GET", "{ask}stays"}) == "2");
  CHECK(cluster.node(from).command({"GET", "{ask}moved"}) == redirect("MOVED", slot, cluster.node(to)));
}

TEST_CASE("killing a master promotes its replica, with the writes it acknowledged", "[harness][cluster]") {
  redis_cluster cluster({.masters = 3, .replicas_per_master = 1});
  std::string key = "{failover}k";
  auto slot = slot_of(cluster, key);
  auto master = cluster.master_of_slot(slot);
  auto replica = cluster.replica_of(master);
  {
    // WAIT counts the replicas that have the writes of its own connection:
    // SET and WAIT go on one. (Each command() is a new redis-cli, whose
    // WAIT waits for nothing and answers 1 at once, replica synced or not.)
    raw_client c(cluster.node(master).port());
    c.send(resp({"SET", key, "before"}) + resp({"WAIT", "1", "5000"}));
    REQUIRE(c.read_bytes(5 + 4) == "+OK\r\n:1\r\n");  // on the replica too
  }
  CHECK_THROWS_AS(cluster.kill_master_and_wait(replica), std::invalid_argument);  // not a master: nothing killed
  REQUIRE(cluster.node(replica).running());

  auto start = std::chrono::steady_clock::now();
  auto promoted = cluster.kill_master_and_wait(master, 30s);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  CHECK(took.count() < 30000);  // -s prints how long it took
  CHECK(promoted == replica);
  CHECK_FALSE(cluster.node(master).running());

  auto masters = cluster.masters();
  CHECK(masters.size() == 3);
  CHECK(std::find(masters.begin(), masters.end(), promoted) != masters.end());
  CHECK(std::find(masters.begin(), masters.end(), master) == masters.end());
  CHECK(cluster.master_of_slot(slot) == promoted);
  CHECK(cluster.node(promoted).command({"GET", key}) == "before");
  CHECK(cluster.node(promoted).command({"SET", key, "after"}) == "OK");
  for (auto m : masters)
    if (m != promoted) CHECK(cluster.node(m).command({"GET", key}) == redirect("MOVED", slot, cluster.node(promoted)));
  cluster.wait_ok(5s);
  CHECK(cluster.url().find("127.0.0.1:" + std::to_string(cluster.node(master).port())) != std::string::npos);
}
