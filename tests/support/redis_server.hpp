// The test harness: private redis-server, replica, Sentinel and Cluster
// processes on free 127.0.0.1 ports, stopped when their owner is destroyed.
// Plain POSIX and the standard library only, independent of the code under
// test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlock::test {

/// A TCP port on 127.0.0.1 that was free a moment ago (never 6379).
std::uint16_t free_port();

struct server_options {
  std::string password;                 ///< requirepass, when not empty
  bool unix_socket = false;             ///< also listen on a socket in the server's temp dir
  std::vector<std::string> extra_args;  ///< appended to the command line
  std::uint16_t replica_of = 0;         ///< start as a replica of 127.0.0.1:<port>
  bool cluster = false;                 ///< --cluster-enabled yes (port and port+10000 free)
  std::vector<std::string> environment{};  ///< "NAME=value" added to the server's environment
};

/// One redis-server process with no persistence, in its own temp dir.
/// Starts on construction (waiting until it answers PING); killed, reaped
/// and cleaned up on destruction, and killed by the kernel if the test
/// process dies first (PR_SET_PDEATHSIG).
class redis_server {
 public:
  explicit redis_server(server_options opts = {});
  ~redis_server();
  redis_server(redis_server&&) noexcept;
  redis_server& operator=(redis_server&&) = delete;
  redis_server(const redis_server&) = delete;

  std::uint16_t port() const { return port_; }
  /// "redis://127.0.0.1:<port>", with ":password@" when there is one.
  std::string url() const;
  std::string unix_path() const;
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  void kill();     ///< SIGKILL and reap: a crash
  void stop();     ///< SIGTERM, wait for exit: a clean shutdown
  void start();    ///< start again on the same port
  void restart();  ///< kill, then start
  void pause();    ///< SIGSTOP: clients hang
  void resume();   ///< SIGCONT

  /// Runs one command through redis-cli (arguments as argv, no shell) and
  /// returns its output without the trailing newline; throws on failure.
  std::string command(const std::vector<std::string>& args) const;
  /// The last lines of the server's log, for failure messages.
  std::string log_tail(std::size_t lines = 20) const;
  /// Polls until `INFO replication` says master_link_status:up (replicas).
  void wait_until_synced(std::chrono::milliseconds limit = std::chrono::seconds(10)) const;

 private:
  void spawn();
  void wait_ready(std::chrono::milliseconds limit);
  void end_with(int signal);

  server_options opts_;
  std::uint16_t port_ = 0;
  std::string dir_;
  pid_t pid_ = -1;
};

/// How often `server` ran `command` (lower case, as INFO commandstats names
/// it: "evalsha", "subscribe"), 0 if never.
long long command_calls(const redis_server& server, const std::string& command);


/// N Sentinel processes watching a master named `master_name`.
class sentinel_group {
 public:
  sentinel_group(std::string master_name, std::uint16_t master_port, int count = 3, int quorum = 2,
                 int down_after_ms = 1000, int failover_timeout_ms = 3000);
  ~sentinel_group();
  std::vector<std::uint16_t> ports() const;
  const std::string& master_name() const { return name_; }
  /// SENTINEL get-master-addr-by-name, asked of the first live sentinel.
  std::uint16_t current_master_port() const;
  void kill(std::size_t i);
  bool running(std::size_t i) const { return pids_.at(i) > 0; }
  /// Runs one command on sentinel `i` through redis-cli (see redis_server::command).
  std::string command(std::size_t i, const std::vector<std::string>& args) const;
  /// Polls until every live sentinel knows `replicas` replicas of the
  /// master and every other live sentinel: then a failover can be agreed.
  void wait_ready(int replicas, std::chrono::milliseconds limit = std::chrono::seconds(20)) const;

 private:
  std::string name_;
  std::vector<std::uint16_t> ports_;
  std::vector<pid_t> pids_;
  std::vector<std::string> dirs_;
};

/// A Redis Cluster of `masters` masters (and replicas), created with
/// `redis-cli --cluster create`, ready when every node says cluster_state:ok.
class redis_cluster {
 public:
  explicit redis_cluster(int masters = 3, int replicas_per_master = 0);
  std::vector<std::uint16_t> ports() const;
  redis_server& node(std::size_t i) { return *nodes_.at(i); }

 private:
  std::vector<std::unique_ptr<redis_server>> nodes_;
};

}  // namespace dlock::test
