// The process harness: fork/exec of redis-server, redis-cli and Sentinel,
// readiness by a raw PING, and clean-up that survives failing tests.
#include "redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dlock::test {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

bool port_free(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Below Linux's ephemeral range (32768+), so outgoing connections never
// hold our ports; a cluster node also needs port + 10000 (its bus).
// A port is never handed out twice in one process: two servers started
// side by side (a test's deployments, the story's three acts) cannot pick
// the same port between one's check and its bind.
std::uint16_t pick_port(bool with_bus) {
  static std::mt19937 rng{std::random_device{}()};
  static std::mutex m;
  static std::set<std::uint16_t> handed_out;
  std::lock_guard g(m);
  std::uniform_int_distribution<int> pick(20000, 31999);
  for (int tries = 0; tries < 1000; ++tries) {
    auto p = static_cast<std::uint16_t>(pick(rng));
    auto bus = static_cast<std::uint16_t>(p + 10000);
    if (p == 6379 || p == 16379 || handed_out.count(p) || (with_bus && handed_out.count(bus))) continue;
    if (port_free(p) && (!with_bus || port_free(bus))) {
      handed_out.insert(p);
      if (with_bus) handed_out.insert(bus);
      return p;
    }
  }
  throw std::runtime_error("no free port found on 127.0.0.1");
}

std::string make_temp_dir() {
  std::string pattern = (fs::temp_directory_path() / "dlock-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

// Starts `argv` in `dir` with stdout/stderr to `log` (or a pipe's write end
// when `out_fd` >= 0). The child dies with the thread that started it.
pid_t spawn_process(const std::vector<std::string>& args, const std::string& dir, int out_fd = -1,
                    const std::vector<std::string>& extra_env = {}) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment, with `extra_env` added: built before the fork.
  std::vector<std::string> env_copy = extra_env;
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  for (auto& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string devnull = "/dev/null";
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (!dir.empty() && ::chdir(dir.c_str()) != 0) ::_exit(127);
    int null = ::open(devnull.c_str(), O_RDWR);
    ::dup2(null, 0);
    ::dup2(out_fd >= 0 ? out_fd : null, 1);
    ::dup2(null, 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

bool exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

// Sends `payload` and reads until `expect` arrives or `limit` passes.
bool raw_exchange(std::uint16_t port, const std::string& payload, const std::string& expect,
                  std::chrono::milliseconds limit) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::write(fd, payload.data(), payload.size()) == static_cast<ssize_t>(payload.size())) {
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (got.find(expect) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[512];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    ok = got.find(expect) != std::string::npos;
  }
  ::close(fd);
  return ok;
}

std::string resp_command(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

// Runs a program and returns its stdout; throws if it fails.
std::string run_capture(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = spawn_process(args, "", fds[1]);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = reap(pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("command failed: " + args.front() + " ... " + args.back() + ": " + out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::uint16_t free_port() { return pick_port(false); }

redis_server::redis_server(server_options opts) : opts_(std::move(opts)) {
  dir_ = make_temp_dir();
  for (int attempt = 0;; ++attempt) {
    port_ = pick_port(opts_.cluster);
    spawn();
    try {
      wait_ready(10s);
      return;
    } catch (const std::exception&) {
      // wait_ready forgets a server that exited (pid_ -1): it died, most
      // likely of a port another process took between the check and the bind.
      bool died = pid_ <= 0 || exited(pid_);
      if (pid_ > 0 && !died) {
        ::kill(pid_, SIGKILL);
        reap(pid_);
      }
      pid_ = -1;
      // Another process took the port between the check and the bind.
      if (!died || attempt >= 4) {
        auto tail = log_tail();
        fs::remove_all(dir_);
        throw std::runtime_error("redis-server did not start: " + tail);
      }
    }
  }
}

redis_server::redis_server(redis_server&& other) noexcept
    : opts_(std::move(other.opts_)), port_(other.port_), dir_(std::move(other.dir_)), pid_(other.pid_) {
  other.pid_ = -1;
  other.dir_.clear();
}

redis_server::~redis_server() {
  end_with(SIGKILL);
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string redis_server::url() const {
  std::string creds = opts_.password.empty() ? "" : ":" + opts_.password + "@";
  return "redis://" + creds + "127.0.0.1:" + std::to_string(port_);
}

std::string redis_server::unix_path() const { return dir_ + "/redis.sock"; }

void redis_server::spawn() {
  std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", dir_,
                                   "--logfile", dir_ + "/redis.log", "--daemonize", "no"};
  if (!opts_.password.empty()) args.insert(args.end(), {"--requirepass", opts_.password, "--masterauth", opts_.password});
  if (opts_.unix_socket) args.insert(args.end(), {"--unixsocket", unix_path(), "--unixsocketperm", "700"});
  if (opts_.replica_of) args.insert(args.end(), {"--replicaof", "127.0.0.1", std::to_string(opts_.replica_of)});
  if (opts_.cluster)
    args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file", dir_ + "/nodes.conf",
                             "--cluster-node-timeout", "2000"});
  args.insert(args.end(), opts_.extra_args.begin(), opts_.extra_args.end());
  pid_ = spawn_process(args, dir_, -1, opts_.environment);
}

void redis_server::wait_ready(std::chrono::milliseconds limit) {
  std::string probe = opts_.password.empty() ? resp_command({"PING"})
                                             : resp_command({"AUTH", opts_.password}) + resp_command({"PING"});
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (raw_exchange(port_, probe, "+PONG", 500ms)) return;
    if (exited(pid_)) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited");
    }
    std::this_thread::sleep_for(10ms);
  }
  throw std::runtime_error("redis-server did not answer PING");
}

void redis_server::end_with(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);  // a paused server must run to die
  ::kill(pid_, signal);
  reap(pid_);
  pid_ = -1;
}

void redis_server::kill() { end_with(SIGKILL); }
void redis_server::stop() { end_with(SIGTERM); }

void redis_server::start() {
  if (pid_ > 0) return;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    spawn();
    try {
      wait_ready(10s);
      return;
    } catch (const std::exception&) {
      if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        reap(pid_);
        pid_ = -1;
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("redis-server did not restart on port " + std::to_string(port_) + ": " + log_tail());
      std::this_thread::sleep_for(100ms);
    }
  }
}

void redis_server::restart() {
  kill();
  start();
}

namespace {

// The state letter in /proc/<pid>/stat ('T' when stopped).
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');  // the command name may hold spaces
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

void wait_for_state(pid_t pid, bool stopped) {
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while ((process_state(pid) == 'T') != stopped && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
}

}  // namespace

void redis_server::pause() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGSTOP);
  wait_for_state(pid_, true);  // SIGSTOP is asynchronous; tests need it done
}

void redis_server::resume() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  wait_for_state(pid_, false);
}

std::string redis_server::command(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"redis-cli", "-h", "127.0.0.1", "-p", std::to_string(port_)};
  if (!opts_.password.empty()) argv.insert(argv.end(), {"-a", opts_.password, "--no-auth-warning"});
  argv.insert(argv.end(), args.begin(), args.end());
  return run_capture(argv);
}

std::string redis_server::log_tail(std::size_t lines) const {
  std::ifstream in(dir_ + "/redis.log");
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

void redis_server::wait_until_synced(std::chrono::milliseconds limit) const {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (command({"INFO", "replication"}).find("master_link_status:up") != std::string::npos) return;
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("replica did not sync");
}

sentinel_group::sentinel_group(std::string master_name, std::uint16_t master_port, int count, int quorum,
                               int down_after_ms, int failover_timeout_ms)
    : name_(std::move(master_name)) {
  for (int i = 0; i < count; ++i) {
    auto dir = make_temp_dir();
    auto port = pick_port(false);
    std::ofstream conf(dir + "/sentinel.conf");
    conf << "port " << port << "\nbind 127.0.0.1\ndir " << dir << "\nlogfile " << dir << "/sentinel.log\n"
         << "sentinel monitor " << name_ << " 127.0.0.1 " << master_port << " " << quorum << "\n"
         << "sentinel down-after-milliseconds " << name_ << " " << down_after_ms << "\n"
         << "sentinel failover-timeout " << name_ << " " << failover_timeout_ms << "\n";
    conf.close();
    pids_.push_back(spawn_process({"redis-server", dir + "/sentinel.conf", "--sentinel"}, dir));
    ports_.push_back(port);
    dirs_.push_back(dir);
  }
  for (auto port : ports_) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!raw_exchange(port, resp_command({"PING"}), "+PONG", 500ms)) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("sentinel did not start");
      std::this_thread::sleep_for(20ms);
    }
  }
}

sentinel_group::~sentinel_group() {
  for (auto pid : pids_) {
    if (pid <= 0) continue;
    ::kill(pid, SIGKILL);
    reap(pid);
  }
  for (auto& d : dirs_) {
    std::error_code ec;
    fs::remove_all(d, ec);
  }
}

std::vector<std::uint16_t> sentinel_group::ports() const { return ports_; }

std::uint16_t sentinel_group::current_master_port() const {
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    auto out = run_capture({"redis-cli", "-h", "127.0.0.1", "-p", std::to_string(ports_[i]), "SENTINEL",
                            "get-master-addr-by-name", name_});
    auto nl = out.find('\n');
    if (nl != std::string::npos) return static_cast<std::uint16_t>(std::stoi(out.substr(nl + 1)));
  }
  throw std::runtime_error("no sentinel knows the master");
}

std::string sentinel_group::command(std::size_t i, const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"redis-cli", "-h", "127.0.0.1", "-p", std::to_string(ports_.at(i))};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_capture(argv);
}

void sentinel_group::wait_ready(int replicas, std::chrono::milliseconds limit) const {
  // SENTINEL MASTER <name> prints field and value on alternate lines.
  auto field = [](const std::string& out, const std::string& name) {
    auto at = out.find(name + "\n");
    if (at == std::string::npos) return -1;
    return std::atoi(out.c_str() + at + name.size() + 1);
  };
  int live = 0;
  for (auto pid : pids_) live += pid > 0;
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool ready = true;
    for (std::size_t i = 0; i < ports_.size() && ready; ++i) {
      if (pids_[i] <= 0) continue;
      auto out = command(i, {"SENTINEL", "MASTER", name_});
      ready = field(out, "num-slaves") == replicas && field(out, "num-other-sentinels") == live - 1;
    }
    if (ready) return;
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("sentinels did not get ready");
    std::this_thread::sleep_for(100ms);
  }
}

void sentinel_group::kill(std::size_t i) {
  if (pids_.at(i) <= 0) return;
  ::kill(pids_[i], SIGKILL);
  reap(pids_[i]);
  pids_[i] = -1;
}

redis_cluster::redis_cluster(int masters, int replicas_per_master) {
  int total = masters * (1 + replicas_per_master);
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < total; ++i) {
    server_options o;
    o.cluster = true;
    nodes_.push_back(std::make_unique<redis_server>(o));
    create.push_back("127.0.0.1:" + std::to_string(nodes_.back()->port()));
  }
  create.insert(create.end(), {"--cluster-replicas", std::to_string(replicas_per_master), "--cluster-yes"});
  run_capture(create);
  auto deadline = std::chrono::steady_clock::now() + 30s;
  for (auto& n : nodes_) {
    while (n->command({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("cluster did not become ok");
      std::this_thread::sleep_for(50ms);
    }
  }
}

std::vector<std::uint16_t> redis_cluster::ports() const {
  std::vector<std::uint16_t> out;
  for (auto& n : nodes_) out.push_back(n->port());
  return out;
}

long long command_calls(const redis_server& server, const std::string& command) {
  auto info = server.command({"INFO", "commandstats"});
  auto key = "cmdstat_" + command + ":calls=";
  auto at = info.find(key);
  if (at == std::string::npos) return 0;
  return std::stoll(info.substr(at + key.size()));
}

}  // namespace dlock::test
