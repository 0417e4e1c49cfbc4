// The harness itself: servers start on private ports, crash, restart, pause,
// authenticate, replicate, and leave nothing behind.
#include <catch2/catch.hpp>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

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

TEST_CASE("a three-master cluster comes up", "[harness][cluster]") {
  dlock::test::redis_cluster cluster(3);
  CHECK(cluster.ports().size() == 3);
  CHECK(cluster.node(0).command({"CLUSTER", "KEYSLOT", "foo"}) == "12182");
}
