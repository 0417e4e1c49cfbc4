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

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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

// The port a server or sentinel is about to bind (see set_port_picked_hook).
std::mutex hook_mutex;
std::function<void(std::uint16_t)> port_picked_hook;

std::uint16_t pick_server_port(bool with_bus) {
  auto port = pick_port(with_bus);
  std::function<void(std::uint16_t)> hook;
  {
    std::lock_guard g(hook_mutex);
    hook = port_picked_hook;
  }
  if (hook) hook(port);
  return port;
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

// Runs a program and returns its stdout; throws if it fails, or if it is
// still running after `limit` (when not zero: then it is killed).
std::string run_capture(const std::vector<std::string>& args, std::chrono::milliseconds limit = 0ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = spawn_process(args, "", fds[1]);
  ::close(fds[1]);
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool late = false;
  std::string out;
  char buf[4096];
  for (;;) {
    if (limit > 0ms) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fds[0], POLLIN, 0};
      int ready = left > 0ms ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        late = true;
        ::kill(pid, SIGKILL);
        break;
      }
    }
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = reap(pid);
  if (late)
    throw std::runtime_error("command timed out after " + std::to_string(limit.count()) + " ms: " + args.front() +
                             " ... " + args.back() + ": " + out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("command failed: " + args.front() + " ... " + args.back() + ": " + out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::uint16_t free_port() { return pick_port(false); }

void set_port_picked_hook(std::function<void(std::uint16_t)> hook) {
  std::lock_guard g(hook_mutex);
  port_picked_hook = std::move(hook);
}

std::string run_program(const std::vector<std::string>& argv, std::chrono::milliseconds limit) {
  return run_capture(argv, limit);
}

tls_files::tls_files() : dir_(make_temp_dir()) {
  try {
    make_ca("ca", "/CN=dlock test CA");
    make_ca("other-ca", "/CN=dlock test CA nobody trusts");
    const std::string server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n";
    make_leaf("server", "ca", "/CN=localhost", server_ext);
    make_leaf("untrusted", "other-ca", "/CN=localhost", server_ext);
    make_leaf("elsewhere", "ca", "/CN=elsewhere.example",
              "subjectAltName=DNS:elsewhere.example\nextendedKeyUsage=serverAuth\n");
    make_leaf("client", "ca", "/CN=dlock test client", "extendedKeyUsage=clientAuth\n");
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
    throw;
  }
}

tls_files::~tls_files() {
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

void tls_files::make_ca(const std::string& name, const std::string& subject) const {
  run_capture({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", dir_ + "/" + name + ".key", "-out", dir_ + "/" + name + ".crt", "-days", "2", "-subj",
               subject, "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
               "keyUsage=critical,keyCertSign,cRLSign"});
}

void tls_files::make_leaf(const std::string& name, const std::string& ca_name, const std::string& subject,
                          const std::string& extensions) const {
  const std::string base = dir_ + "/" + name;
  {
    std::ofstream ext(base + ".ext");
    ext << extensions;
  }
  run_capture({"openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", base + ".key", "-out", base + ".csr", "-subj", subject});
  run_capture({"openssl", "x509", "-req", "-in", base + ".csr", "-CA", dir_ + "/" + ca_name + ".crt", "-CAkey",
               dir_ + "/" + ca_name + ".key", "-CAcreateserial", "-out", base + ".crt", "-days", "2", "-extfile",
               base + ".ext"});
}

redis_server::redis_server(server_options opts) : opts_(std::move(opts)) {
  dir_ = make_temp_dir();
  for (int attempt = 0;; ++attempt) {
    port_ = pick_server_port(opts_.cluster);
    plain_port_ = opts_.tls && opts_.plain_port_too ? pick_port(false) : 0;
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
    : opts_(std::move(other.opts_)),
      port_(other.port_),
      plain_port_(other.plain_port_),
      dir_(std::move(other.dir_)),
      pid_(other.pid_) {
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
  if (opts_.tls) return "rediss://" + creds + "127.0.0.1:" + std::to_string(port_) + "?ca_file=" + opts_.tls->ca();
  return "redis://" + creds + "127.0.0.1:" + std::to_string(port_);
}

std::string redis_server::unix_path() const { return dir_ + "/redis.sock"; }

void redis_server::spawn() {
  // A TLS server listens on its TLS port, and on a plain one only when asked.
  const auto plain = opts_.tls ? plain_port_ : port_;
  std::vector<std::string> args = {"redis-server", "--port", std::to_string(plain), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", dir_,
                                   "--logfile", dir_ + "/redis.log", "--daemonize", "no",
                                   // A replica's first sync starts at once, not 5 s later (7.0's
                                   // default diskless sync delay, which waits for more replicas to
                                   // share the RDB: two replicas could take over 10 s to sync).
                                   "--repl-diskless-sync-delay", "0"};
  if (opts_.tls)
    args.insert(args.end(), {"--tls-port", std::to_string(port_), "--tls-cert-file", opts_.tls->server().cert,
                             "--tls-key-file", opts_.tls->server().key, "--tls-ca-cert-file", opts_.tls->ca(),
                             "--tls-auth-clients", opts_.tls_auth_clients});
  if (!opts_.password.empty()) args.insert(args.end(), {"--requirepass", opts_.password, "--masterauth", opts_.password});
  if (opts_.unix_socket) args.insert(args.end(), {"--unixsocket", unix_path(), "--unixsocketperm", "700"});
  if (opts_.replica_of) args.insert(args.end(), {"--replicaof", "127.0.0.1", std::to_string(opts_.replica_of)});
  if (opts_.cluster)
    args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file", dir_ + "/nodes.conf",
                             "--cluster-node-timeout", std::to_string(opts_.cluster_node_timeout_ms)});
  args.insert(args.end(), opts_.extra_args.begin(), opts_.extra_args.end());
  pid_ = spawn_process(args, dir_, -1, opts_.environment);
}

void redis_server::wait_ready(std::chrono::milliseconds limit) {
  if (opts_.tls) {  // redis-cli speaks TLS for us
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        if (command({"PING"}) == "PONG") return;
      } catch (const std::exception&) {
      }
      if (exited(pid_)) {
        pid_ = -1;
        throw std::runtime_error("redis-server exited");
      }
      std::this_thread::sleep_for(20ms);
    }
    throw std::runtime_error("redis-server did not answer PING over TLS");
  }
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
  auto argv = cli();
  argv.insert(argv.end(), args.begin(), args.end());
  return run_capture(argv);
}

std::vector<std::string> redis_server::cli() const {
  std::vector<std::string> argv = {"redis-cli", "-h", "127.0.0.1", "-p", std::to_string(port_)};
  if (!opts_.password.empty()) argv.insert(argv.end(), {"-a", opts_.password, "--no-auth-warning"});
  if (opts_.tls)
    argv.insert(argv.end(), {"--tls", "--cacert", opts_.tls->ca(), "--cert", opts_.tls->client().cert, "--key",
                             opts_.tls->client().key});
  return argv;
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

void redis_server::wait_until_listed(int replicas, std::chrono::milliseconds limit) const {
  // ROLE of a master, one value a line: "master", its offset, then ip,
  // port and offset of each replica.
  // Then a write and a WAIT on one connection (redis-cli reading both from
  // its input): the replicas acknowledge writes within 100 ms. Right after
  // a sync a listed replica may not be sent the stream until its first
  // acknowledgement, up to a second later.
  std::string shell = "printf 'SET dlock-harness:ready 1\\nWAIT " + std::to_string(replicas) +
                      " 100\\nDEL dlock-harness:ready\\n' |";
  for (const auto& a : cli()) shell += " '" + a + "'";
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool listed = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!listed) {
      auto role = command({"ROLE"});
      auto lines = std::count(role.begin(), role.end(), '\n') + 1;
      listed = role.rfind("master", 0) == 0 && lines == 2 + 3 * replicas;
    }
    if (listed && run_capture({"sh", "-c", shell}) == "OK\n" + std::to_string(replicas) + "\n1") return;
    std::this_thread::sleep_for(20ms);
  }
  throw std::runtime_error("the master did not list " + std::to_string(replicas) + " replicas acknowledging writes");
}

sentinel_group::sentinel_group(std::string master_name, std::uint16_t master_port, int count, int quorum,
                               int down_after_ms, int failover_timeout_ms, std::shared_ptr<const tls_files> tls)
    : name_(std::move(master_name)), tls_(std::move(tls)) {
  // Writes sentinel i's configuration on a newly picked port and starts it.
  auto start = [&](std::size_t i) {
    const auto& dir = dirs_[i];
    auto port = pick_server_port(false);
    std::ofstream conf(dir + "/sentinel.conf", std::ios::trunc);
    if (tls_)
      conf << "port 0\ntls-port " << port << "\ntls-cert-file " << tls_->server().cert << "\ntls-key-file "
           << tls_->server().key << "\ntls-ca-cert-file " << tls_->ca() << "\ntls-replication yes\n"
           << "tls-auth-clients no\n";
    else
      conf << "port " << port << "\n";
    conf << "bind 127.0.0.1\ndir " << dir << "\nlogfile " << dir << "/sentinel.log\n"
         << "sentinel monitor " << name_ << " 127.0.0.1 " << master_port << " " << quorum << "\n"
         << "sentinel down-after-milliseconds " << name_ << " " << down_after_ms << "\n"
         << "sentinel failover-timeout " << name_ << " " << failover_timeout_ms << "\n";
    conf.close();
    ports_[i] = port;
    pids_[i] = spawn_process({"redis-server", dir + "/sentinel.conf", "--sentinel"}, dir);
  };
  auto answers = [&](std::size_t i) {
    if (!tls_) return raw_exchange(ports_[i], resp_command({"PING"}), "+PONG", 500ms);
    try {
      return command(i, {"PING"}) == "PONG";
    } catch (const std::exception&) {
      return false;
    }
  };
  try {
    for (int i = 0; i < count; ++i) {
      dirs_.push_back(make_temp_dir());
      ports_.push_back(0);
      pids_.push_back(-1);
      start(dirs_.size() - 1);
    }
    for (std::size_t i = 0; i < ports_.size(); ++i) {
      auto deadline = std::chrono::steady_clock::now() + 10s;
      for (int restarts = 0; !answers(i);) {
        // A sentinel that exited at once most likely lost its port to another
        // process between the check and the bind (as redis_server above):
        // start it again on another port, a few times.
        if (exited(pids_[i]) && restarts++ < 4) {
          start(i);
          deadline = std::chrono::steady_clock::now() + 10s;
          continue;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          std::ifstream log(dirs_[i] + "/sentinel.log");
          std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
          if (text.size() > 2000) text.erase(0, text.size() - 2000);
          throw std::runtime_error("sentinel did not start on port " + std::to_string(ports_[i]) + ": " + text);
        }
        std::this_thread::sleep_for(20ms);
      }
    }
  } catch (...) {
    stop();  // a constructor that throws runs no destructor
    throw;
  }
}

std::vector<std::string> sentinel_group::cli(std::size_t i) const {
  std::vector<std::string> argv = {"redis-cli", "-h", "127.0.0.1", "-p", std::to_string(ports_.at(i))};
  if (tls_)
    argv.insert(argv.end(), {"--tls", "--cacert", tls_->ca(), "--cert", tls_->client().cert, "--key",
                             tls_->client().key});
  return argv;
}

sentinel_group::~sentinel_group() { stop(); }

void sentinel_group::stop() {
  for (auto& pid : pids_) {
    if (pid <= 0) continue;
    ::kill(pid, SIGKILL);
    reap(pid);
    pid = -1;
  }
  for (auto& d : dirs_) {
    std::error_code ec;
    fs::remove_all(d, ec);
  }
  dirs_.clear();
}

std::vector<std::uint16_t> sentinel_group::ports() const { return ports_; }

std::uint16_t sentinel_group::current_master_port() const {
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    auto out = command(i, {"SENTINEL", "get-master-addr-by-name", name_});
    auto nl = out.find('\n');
    if (nl != std::string::npos) return static_cast<std::uint16_t>(std::stoi(out.substr(nl + 1)));
  }
  throw std::runtime_error("no sentinel knows the master");
}

std::string sentinel_group::command(std::size_t i, const std::vector<std::string>& args) const {
  auto argv = cli(i);
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

// --- redis_cluster ----------------------------------------------------------

namespace {

constexpr std::size_t slot_count = 16384;

// One line of CLUSTER NODES:
//   <id> <ip:port@bus[,hostname]> <flags> <master id or -> <ping sent> <pong received> <epoch> <link> <slots>...
struct node_line {
  std::string id;
  std::uint16_t port = 0;  // 0 while the address is unknown (noaddr, handshake)
  std::string flags;       // "myself,master", "slave", "master,fail", "master,fail?", ...
  std::string master;      // a replica's master's ID, "-" for a master
  std::string link;        // "connected" or "disconnected"
  std::vector<std::pair<int, int>> slots;  // ranges served, both ends included

  bool has(const std::string& flag) const { return ("," + flags + ",").find("," + flag + ",") != std::string::npos; }
  bool serves(int slot) const {
    return std::any_of(slots.begin(), slots.end(), [&](auto& r) { return r.first <= slot && slot <= r.second; });
  }
  std::size_t slots_served() const {
    std::size_t n = 0;
    for (auto& r : slots) n += static_cast<std::size_t>(r.second - r.first + 1);
    return n;
  }
};

std::vector<node_line> parse_nodes(const std::string& text) {
  std::vector<node_line> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    node_line n;
    std::string addr, ping, pong, epoch;
    if (!(fields >> n.id >> addr >> n.flags >> n.master >> ping >> pong >> epoch >> n.link)) continue;
    auto colon = addr.rfind(':', addr.find('@'));
    if (colon != std::string::npos) n.port = static_cast<std::uint16_t>(std::atoi(addr.c_str() + colon + 1));
    for (std::string range; fields >> range;) {
      // "[slot->-id]" (migrating) and "[slot-<-id]" (importing) appear on the
      // myself line only, and do not change who serves the slot.
      if (range.empty() || range.front() == '[') continue;
      auto dash = range.find('-');
      int first = std::atoi(range.c_str());
      int last = dash == std::string::npos ? first : std::atoi(range.c_str() + dash + 1);
      n.slots.emplace_back(first, last);
    }
    out.push_back(std::move(n));
  }
  return out;
}

std::vector<node_line> cluster_nodes(const redis_server& node) { return parse_nodes(node.command({"CLUSTER", "NODES"})); }

const node_line* myself_in(const std::vector<node_line>& lines) {
  for (auto& l : lines)
    if (l.has("myself")) return &l;
  return nullptr;
}

const node_line* owner_in(const std::vector<node_line>& lines, int slot) {
  for (auto& l : lines)
    if (l.serves(slot)) return &l;
  return nullptr;
}

// The value of `name:` in INFO-style output ("a:b\r\n" lines).
std::string info_field(const std::string& info, const std::string& name) {
  auto key = name + ":";
  for (std::size_t at = 0; at < info.size();) {
    auto end = info.find('\n', at);
    if (end == std::string::npos) end = info.size();
    if (info.compare(at, key.size(), key) == 0) {
      auto value = info.substr(at + key.size(), end - at - key.size());
      if (!value.empty() && value.back() == '\r') value.pop_back();
      return value;
    }
    at = end + 1;
  }
  return "";
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

std::string describe(std::size_t i, const redis_server& node) {
  return "node " + std::to_string(i) + " (port " + std::to_string(node.port()) + ")";
}

// Which node served which slots, in one node's view: "first-last owner" lines, sorted.
std::string slot_map(const std::vector<node_line>& lines) {
  std::vector<std::string> ranges;
  for (auto& l : lines)
    for (auto& r : l.slots) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%05d-%05d ", r.first, r.second);
      ranges.push_back(buf + l.id);
    }
  std::sort(ranges.begin(), ranges.end());
  std::string out;
  for (auto& r : ranges) out += r + "\n";
  return out;
}

// The whole layout in one node's view: each node's role, master and slots.
std::string layout(const std::vector<node_line>& lines) {
  std::vector<std::string> rows;
  for (auto& l : lines) {
    std::string row = l.id + (l.has("master") ? " master " : " replica ") + l.master;
    for (auto& r : l.slots) row += " " + std::to_string(r.first) + "-" + std::to_string(r.second);
    rows.push_back(row);
  }
  std::sort(rows.begin(), rows.end());
  std::string out;
  for (auto& r : rows) out += r + "\n";
  return out;
}

// Polls `check` (which answers why the wait is not over yet, or "" when it
// is; an exception counts as a reason) until it is over or `limit` passes.
void poll_until(const std::string& what, std::chrono::milliseconds limit, const std::function<std::string()>& check) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::string why;
    try {
      why = check();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline)
      throw std::runtime_error("redis_cluster: " + what + " took over " + std::to_string(limit.count()) +
                               " ms; last: " + why);
    std::this_thread::sleep_for(50ms);
  }
}

// Why the cluster is not ok yet ("" when it is): see redis_cluster::wait_ok.
std::string not_ok(const redis_cluster& c, const std::function<std::size_t(const std::string&)>& index_of) {
  std::string first_map;
  std::size_t first = c.nodes();
  for (std::size_t i = 0; i < c.nodes(); ++i) {
    auto& node = c.node(i);
    if (!node.running()) continue;
    auto state = info_field(node.command({"CLUSTER", "INFO"}), "cluster_state");
    if (state != "ok") return describe(i, node) + " says cluster_state:" + state;
    auto lines = cluster_nodes(node);
    std::size_t covered = 0;
    for (auto& l : lines) {
      if (l.slots.empty()) continue;
      auto owner = index_of(l.id);
      if (owner == c.nodes() || !c.node(owner).running())
        return describe(i, node) + " says a stopped or unknown node serves slots: " + l.id + " " + l.flags;
      if (l.has("fail") || l.has("fail?"))
        return describe(i, node) + " suspects " + describe(owner, c.node(owner)) + ", which serves slots: " + l.flags;
      covered += l.slots_served();
    }
    if (covered != slot_count) return describe(i, node) + " sees " + std::to_string(covered) + " slots served";
    auto map = slot_map(lines);
    if (first == c.nodes()) {
      first = i;
      first_map = map;
    } else if (map != first_map) {
      return describe(first, c.node(first)) + " and " + describe(i, node) + " disagree on the slot map";
    }
  }
  if (first == c.nodes()) return "no node is running";
  return "";
}

// Why a new cluster has not settled yet ("" when it has): see the
// redis_cluster constructor.
std::string unsettled(const redis_cluster& c, int masters,
                      const std::function<std::size_t(const std::string&)>& index_of) {
  std::string first_layout;
  for (std::size_t i = 0; i < c.nodes(); ++i) {
    auto& node = c.node(i);
    auto state = info_field(node.command({"CLUSTER", "INFO"}), "cluster_state");
    if (state != "ok") return describe(i, node) + " says cluster_state:" + state;
    auto lines = cluster_nodes(node);
    if (lines.size() != c.nodes())
      return describe(i, node) + " knows " + std::to_string(lines.size()) + " of " + std::to_string(c.nodes()) + " nodes";
    int serving = 0;
    std::size_t covered = 0;
    for (auto& l : lines) {
      if (index_of(l.id) == c.nodes()) return describe(i, node) + " knows a stranger: " + l.id;
      if (l.has("handshake") || l.has("noaddr") || l.has("fail") || l.has("fail?") || l.link != "connected")
        return describe(i, node) + " sees node " + std::to_string(l.port) + " as " + l.flags + ", " + l.link;
      if (l.has("master") && !l.slots.empty()) ++serving;
      covered += l.slots_served();
    }
    if (serving != masters || covered != slot_count)
      return describe(i, node) + " sees " + std::to_string(serving) + " masters serving " + std::to_string(covered) +
             " slots";
    auto view = layout(lines);
    if (i == 0)
      first_layout = view;
    else if (view != first_layout)
      return describe(0, c.node(0)) + " and " + describe(i, node) + " disagree on the layout";
    auto me = myself_in(lines);
    if (me && me->has("slave") &&
        info_field(node.command({"INFO", "replication"}), "master_link_status") != "up")
      return describe(i, node) + " has not synced with its master yet";
  }
  return "";
}

}  // namespace

redis_cluster::redis_cluster(int masters, int replicas_per_master)
    : redis_cluster(cluster_options{.masters = masters, .replicas_per_master = replicas_per_master}) {}

redis_cluster::redis_cluster(cluster_options opts) : opts_(std::move(opts)) {
  const bool single = opts_.masters == 1 && opts_.replicas_per_master == 0;
  if ((opts_.masters < 3 && !single) || opts_.replicas_per_master < 0)
    throw std::invalid_argument(
        "redis_cluster: redis-cli creates clusters of 3 or more masters (or one master alone, without replicas)");
  int total = opts_.masters * (1 + opts_.replicas_per_master);
  std::vector<std::string> create = {"redis-cli"};
  if (!opts_.password.empty()) create.insert(create.end(), {"-a", opts_.password, "--no-auth-warning"});
  if (opts_.tls)
    create.insert(create.end(), {"--tls", "--cacert", opts_.tls->ca(), "--cert", opts_.tls->client().cert, "--key",
                                 opts_.tls->client().key});
  create.insert(create.end(), {"--cluster", "create"});
  for (int i = 0; i < total; ++i) {
    server_options o;
    o.cluster = true;
    o.cluster_node_timeout_ms = opts_.node_timeout_ms;
    o.password = opts_.password;
    if (opts_.tls) {
      o.tls = opts_.tls;
      o.extra_args = {"--tls-cluster", "yes", "--tls-replication", "yes"};
    }
    nodes_.push_back(std::make_unique<redis_server>(o));
    create.push_back("127.0.0.1:" + std::to_string(nodes_.back()->port()));
  }
  create.insert(create.end(),
                {"--cluster-replicas", std::to_string(opts_.replicas_per_master), "--cluster-yes"});
  if (single) {
    // A cluster of one master: it takes every slot itself (redis-cli
    // refuses to create one).
    auto reply = nodes_[0]->command({"CLUSTER", "ADDSLOTSRANGE", "0", "16383"});
    if (reply != "OK") throw std::runtime_error("redis_cluster: CLUSTER ADDSLOTSRANGE answered " + reply);
  } else {
    run_capture(create, 60s);
  }
  for (auto& n : nodes_) ids_.push_back(n->command({"CLUSTER", "MYID"}));
  poll_until("settling after creation", 60s,
             [&] { return unsettled(*this, opts_.masters, [&](const std::string& id) { return index_of(id); }); });
}

std::vector<std::uint16_t> redis_cluster::ports() const {
  std::vector<std::uint16_t> out;
  for (auto& n : nodes_) out.push_back(n->port());
  return out;
}

std::string redis_cluster::url() const {
  std::vector<std::size_t> all(nodes_.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return seed_url(all);
}

std::string redis_cluster::seed_url(const std::vector<std::size_t>& nodes) const {
  std::string out = (opts_.tls ? "rediss://" : "redis://") + (opts_.password.empty() ? "" : ":" + opts_.password + "@");
  for (std::size_t k = 0; k < nodes.size(); ++k)
    out += (k ? "," : "") + std::string("127.0.0.1:") + std::to_string(node(nodes[k]).port());
  if (opts_.tls) out += "?ca_file=" + opts_.tls->ca();
  return out;
}

std::size_t redis_cluster::index_of(const std::string& id) const {
  for (std::size_t i = 0; i < ids_.size(); ++i)
    if (ids_[i] == id) return i;
  return nodes_.size();
}

std::size_t redis_cluster::first_live() const {
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i]->running()) return i;
  throw std::runtime_error("redis_cluster: no node is running");
}

std::size_t redis_cluster::master_of_slot(std::uint16_t slot) const {
  auto asked = first_live();
  auto lines = cluster_nodes(node(asked));
  auto owner = owner_in(lines, slot);
  if (!owner) throw std::runtime_error("redis_cluster: " + describe(asked, node(asked)) + " knows no owner of slot " +
                                       std::to_string(slot));
  auto i = index_of(owner->id);
  if (i == nodes_.size()) throw std::runtime_error("redis_cluster: slot " + std::to_string(slot) + " is on a stranger");
  return i;
}

std::vector<std::size_t> redis_cluster::masters() const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i]->running()) continue;
    auto role = split_lines(nodes_[i]->command({"ROLE"}));
    if (!role.empty() && role[0] == "master") out.push_back(i);
  }
  return out;
}

std::size_t redis_cluster::replica_of(std::size_t master) const {
  auto port = std::to_string(node(master).port());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (i == master || !nodes_[i]->running()) continue;
    // A replica's ROLE: slave, master host, master port, link state, offset.
    auto role = split_lines(nodes_[i]->command({"ROLE"}));
    if (role.size() >= 3 && role[0] == "slave" && role[2] == port) return i;
  }
  throw std::runtime_error("redis_cluster: " + describe(master, node(master)) + " has no live replica");
}

void redis_cluster::set_slot(std::size_t i, const std::vector<std::string>& args) const {
  auto reply = node(i).command(args);
  if (reply != "OK") {
    std::string cmd;
    for (auto& a : args) cmd += " " + a;
    throw std::runtime_error("redis_cluster: " + describe(i, node(i)) + " refused" + cmd + ": " + reply);
  }
}

void redis_cluster::begin_migration(std::uint16_t slot, std::size_t from, std::size_t to) {
  if (from == to) throw std::invalid_argument("redis_cluster: a slot migrates between two nodes");
  auto s = std::to_string(slot);
  set_slot(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", node_id(from)});
  set_slot(from, {"CLUSTER", "SETSLOT", s, "MIGRATING", node_id(to)});
}

std::size_t redis_cluster::migrate_keys(std::uint16_t slot, std::size_t from, std::size_t to) {
  auto s = std::to_string(slot);
  std::size_t moved = 0;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    auto keys = split_lines(node(from).command({"CLUSTER", "GETKEYSINSLOT", s, "100"}));
    if (keys.empty()) return moved;
    std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", std::to_string(node(to).port()), "", "0", "5000"};
    if (!opts_.password.empty()) migrate.insert(migrate.end(), {"AUTH", opts_.password});
    migrate.push_back("KEYS");
    migrate.insert(migrate.end(), keys.begin(), keys.end());
    auto reply = node(from).command(migrate);
    if (reply == "OK")
      moved += keys.size();
    else if (reply != "NOKEY")  // they expired meanwhile
      throw std::runtime_error("redis_cluster: MIGRATE from " + describe(from, node(from)) + " to " +
                               describe(to, node(to)) + ": " + reply);
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("redis_cluster: slot " + s + " still holds keys after 60 s of MIGRATE");
  }
}

bool redis_cluster::migrate_key(const std::string& key, std::size_t from, std::size_t to) {
  std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", std::to_string(node(to).port()), key, "0", "5000"};
  if (!opts_.password.empty()) migrate.insert(migrate.end(), {"AUTH", opts_.password});
  auto reply = node(from).command(migrate);
  if (reply == "OK") return true;
  if (reply == "NOKEY") return false;
  throw std::runtime_error("redis_cluster: MIGRATE " + key + " from " + describe(from, node(from)) + " to " +
                           describe(to, node(to)) + ": " + reply);
}

void redis_cluster::finish_migration(std::uint16_t slot, std::size_t to, std::chrono::milliseconds limit) {
  auto s = std::to_string(slot);
  const auto lines = cluster_nodes(node(to));  // owner_in points into it
  auto owner = owner_in(lines, slot);
  std::size_t old = owner ? index_of(owner->id) : nodes_.size();
  std::vector<std::string> assign = {"CLUSTER", "SETSLOT", s, "NODE", node_id(to)};
  set_slot(to, assign);  // first, so that the slot is never without a node that serves it
  if (old < nodes_.size() && old != to && node(old).running()) set_slot(old, assign);
  for (auto m : masters())
    if (m != to && m != old) set_slot(m, assign);
  poll_until("giving slot " + s + " to " + describe(to, node(to)), limit, [&]() -> std::string {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (!nodes_[i]->running()) continue;
      auto lines = cluster_nodes(*nodes_[i]);
      auto at = owner_in(lines, slot);
      if (!at || at->id != node_id(to)) return describe(i, *nodes_[i]) + " says " + (at ? at->id : "nobody");
    }
    return "";
  });
}

void redis_cluster::move_slot(std::uint16_t slot, std::size_t from, std::size_t to) {
  begin_migration(slot, from, to);
  migrate_keys(slot, from, to);
  finish_migration(slot, to);
}

std::size_t redis_cluster::kill_master_and_wait(std::size_t master, std::chrono::milliseconds limit) {
  auto start = std::chrono::steady_clock::now();
  auto& dying = node(master);
  if (!dying.running()) throw std::invalid_argument("redis_cluster: " + describe(master, dying) + " is not running");
  auto lines = cluster_nodes(dying);
  auto me = myself_in(lines);
  if (!me || !me->has("master") || me->slots.empty())
    throw std::invalid_argument("redis_cluster: " + describe(master, dying) + " is not a master serving slots");
  auto slot = static_cast<std::uint16_t>(me->slots.front().first);
  replica_of(master);  // throws when there is none to take over
  dying.kill();
  // Once every live node serves the slot map from live nodes, the dead
  // master's slots are on one of its replicas.
  auto left = limit - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  poll_until("failing over " + describe(master, dying), std::max(left, 0ms),
             [&] { return not_ok(*this, [&](const std::string& id) { return index_of(id); }); });
  return master_of_slot(slot);
}

void redis_cluster::wait_ok(std::chrono::milliseconds limit) const {
  poll_until("getting to cluster_state:ok", limit,
             [&] { return not_ok(*this, [&](const std::string& id) { return index_of(id); }); });
}

long long command_calls(const redis_server& server, const std::string& command) {
  return command_calls_in(server.command({"INFO", "commandstats"}), command);
}

long long script_calls(const redis_server& server) {
  auto info = server.command({"INFO", "commandstats"});
  return command_calls_in(info, "evalsha") + command_calls_in(info, "eval");
}

long long all_calls(const redis_server& server) {
  auto info = server.command({"INFO", "commandstats"});
  long long total = 0;
  // "cmdstat_get:calls=12,usec=...": the first "calls=" of each line.
  for (auto at = info.find(":calls="); at != std::string::npos; at = info.find(":calls=", at + 7))
    total += std::stoll(info.substr(at + 7));
  return total;
}

long long command_calls_in(const std::string& info, const std::string& command) {
  auto key = "cmdstat_" + command + ":calls=";
  auto at = info.find(key);
  if (at == std::string::npos) return 0;
  return std::stoll(info.substr(at + key.size()));
}

}  // namespace dlock::test
