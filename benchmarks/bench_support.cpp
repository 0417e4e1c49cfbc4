// The benchmarks' shared server, PING baseline and ratio reporter.
#include "bench_support.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <cstring>
#include <stdexcept>
#include <chrono>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/ownership/reentrant_hash.hpp>
#include <dlock/ownership/token.hpp>

namespace dlock::bench {

target& server_target() {
  static target t;
  return t;
}

bool optimized() { return DLOCK_MEASURED_OPTIMIZATION != 0; }

void warn_if_unoptimized() {
  static bool said = false;
  if (optimized() || std::exchange(said, true)) return;
  std::fprintf(stderr, "warning: built without optimization (a build that only tests the benchmarks, "
                       "-Dmeasured_optimization=false): these figures are not dlock's; use ./dev bench\n");
}

void choose_server(int& argc, char** argv) {
  warn_if_unoptimized();
  auto& t = server_target();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.rfind("redis://", 0) != 0 && arg.rfind("unix://", 0) != 0) continue;
    t.url = arg;
    for (int k = i; k + 1 < argc; ++k) argv[k] = argv[k + 1];
    --argc;
    break;
  }
  if (t.url.empty()) {
    t.server = std::make_unique<test::redis_server>();
    t.url = t.server->url();
  }
}

plain_socket::plain_socket(const std::string& url) {
  auto cfg = redis::parse_url(url);
  if (cfg.kind == redis::config::transport::unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, cfg.path.data(), std::min(cfg.path.size(), sizeof addr.sun_path - 1));
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("plain socket: cannot connect to " + cfg.describe());
  } else {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(cfg.host.c_str(), std::to_string(cfg.port).c_str(), &hints, &found) != 0 || !found)
      throw std::runtime_error("plain socket: cannot resolve " + cfg.describe());
    fd_ = ::socket(found->ai_family, SOCK_STREAM, 0);
    bool ok = fd_ >= 0 && ::connect(fd_, found->ai_addr, found->ai_addrlen) == 0;
    ::freeaddrinfo(found);
    if (!ok) throw std::runtime_error("plain socket: cannot connect to " + cfg.describe());
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  redis::request hello;
  if (!cfg.password.empty()) {
    if (cfg.user.empty()) hello.push("AUTH", cfg.password);
    else hello.push("AUTH", cfg.user, cfg.password);
    if (!send_line(hello.payload(), "+OK")) throw std::runtime_error("plain socket: AUTH failed");
  }
  if (cfg.database != 0 && !send_line(redis::request().push("SELECT", cfg.database).payload(), "+OK"))
    throw std::runtime_error("plain socket: SELECT failed");
}

plain_socket::~plain_socket() {
  if (fd_ >= 0) ::close(fd_);
}

// Writes one command and reads its one-line reply, which must start with
// `expect`.
bool plain_socket::send_line(const std::string& resp, const char* expect) {
  if (::write(fd_, resp.data(), resp.size()) != static_cast<ssize_t>(resp.size())) return false;
  char buf[256];
  std::size_t got = 0;
  while (got < 2 || buf[got - 1] != '\n') {
    ssize_t n = ::read(fd_, buf + got, sizeof buf - got);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
    if (got == sizeof buf) return false;
  }
  return std::string_view(buf, got).rfind(expect, 0) == 0;
}

bool plain_socket::ping() {
  static const char command[] = "*1\r\n$4\r\nPING\r\n";
  char buf[64];
  if (::write(fd_, command, sizeof command - 1) != static_cast<ssize_t>(sizeof command - 1)) return false;
  std::size_t got = 0;
  while (got < 7) {  // "+PONG\r\n"
    ssize_t n = ::read(fd_, buf + got, sizeof buf - got);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

bool plain_socket::exchange(const std::string& payload, int lines) {
  if (::write(fd_, payload.data(), payload.size()) != static_cast<ssize_t>(payload.size())) return false;
  char buf[512];
  bool failed = false;
  while (lines > 0) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '-' && (i == 0 || buf[i - 1] == '\n')) failed = true;
      if (buf[i] == '\n') --lines;
    }
  }
  return !failed;
}

namespace {

// redis-py's release: compare-and-delete, nothing else.
const redis::script& plain_release() {
  static const redis::script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
)lua");
  return s;
}

}  // namespace

floor_cycle::floor_cycle(const std::string& url, kind k, std::string name)
    : socket_(url), kind_(k), name_(std::move(name)), token_("0123456789abcdef0123456789abcdef") {
  std::vector<const redis::script*> scripts;
  switch (kind_) {
    case kind::token: scripts = {&ownership::Token::release_script()}; break;
    case kind::redis_py: scripts = {&plain_release()}; break;
    case kind::hash:
      scripts = {&ownership::ReentrantHash::acquire_script(), &ownership::ReentrantHash::release_script()};
      break;
  }
  for (auto* s : scripts)
    if (!socket_.exchange(redis::request().push("SCRIPT", "LOAD", s->source()).payload(), 2))
      throw std::runtime_error("floor: SCRIPT LOAD failed");
}

bool floor_cycle::cycle() {
  redis::request acquire, release;
  const auto n = std::to_string(++n_);
  // Marker keys as the ownerships name them: `{name}:release:<id>`.
  const auto marker = [&](const char* what) { return "{" + name_ + "}:" + what + ":" + n; };
  switch (kind_) {
    case kind::token:
      acquire.push("SET", name_, token_, "NX", "PX", 30000).push("PTTL", name_);
      release.push("EVALSHA", ownership::Token::release_script().sha1(), 1, name_, token_);
      break;
    case kind::redis_py:
      acquire.push("SET", name_, token_, "NX", "PX", 30000);
      release.push("EVALSHA", plain_release().sha1(), 1, name_, token_);
      break;
    case kind::hash: {
      const auto field = token_ + ":1";
      const auto waiters = ownership::ReentrantHash::waiters_key(name_);
      acquire.push("EVALSHA", ownership::ReentrantHash::acquire_script().sha1(), 4, name_, marker("acquire"),
                   "{" + name_ + "}:fence", waiters, 30000, field, 10000, 0);
      release.push("EVALSHA", ownership::ReentrantHash::release_script().sha1(), 3, name_, marker("release"), waiters,
                   ownership::ReentrantHash::unlock_message, 30000, field, 10000, "0",
                   ownership::ReentrantHash::channel(name_));
      break;
    }
  }
  return socket_.exchange(acquire.payload(), static_cast<int>(acquire.size())) && socket_.exchange(release.payload(), 1);
}

double ping_us() {
  static const double measured = [] {
    plain_socket socket(server_target().url);
    std::vector<double> samples;
    for (int i = 0; i < 2000; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (!socket.ping()) throw std::runtime_error("plain socket: PING failed");
      samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
  }();
  return measured;
}

void ping_plain_socket(benchmark::State& state) {
  plain_socket socket(server_target().url);
  for (auto _ : state) {
    if (!socket.ping()) {
      state.SkipWithError("PING failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void report_ping(benchmark::State& state, double seconds_per_op) {
  state.counters["ping_us"] = ping_us();
  if (seconds_per_op > 0) state.counters["in_pings"] = seconds_per_op * 1e6 / ping_us();
}

void ping_round_trip(benchmark::State& state) {
  boost::asio::io_context ctx(1);
  RedisBackend redis(ctx.get_executor(), server_target().url);
  for (auto _ : state) {
    bool done = false;
    redis::error_code error;
    redis.async_exec(redis::request().push("PING"), [&](redis::error_code ec, redis::response) {
      error = ec;
      done = true;
    });
    while (!done) ctx.run_one();
    if (error) {
      state.SkipWithError(error.message().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void ratio_reporter::ReportRuns(const std::vector<Run>& runs) {
  ConsoleReporter::ReportRuns(runs);
  for (const auto& r : runs) {
    if (r.run_type != Run::RT_Iteration || r.error_occurred || r.iterations == 0) continue;
    // "contended/x/min_time:0.300/real_time/threads:8" -> "contended/x/threads:8"
    std::string name;
    for (std::size_t at = 0, end; at <= r.benchmark_name().size(); at = end + 1) {
      end = r.benchmark_name().find('/', at);
      if (end == std::string::npos) end = r.benchmark_name().size();
      auto part = r.benchmark_name().substr(at, end - at);
      if (part.rfind("min_time:", 0) == 0 || part == "real_time") continue;
      name += (name.empty() ? "" : "/") + part;
    }
    seconds_[name] = r.real_accumulated_time / static_cast<double>(r.iterations);
    auto it = r.counters.find("items_per_second");
    if (it != r.counters.end()) rate_[name] = it->second.value;
  }
}

void ratio_reporter::Finalize() {
  ConsoleReporter::Finalize();
  if (summary_) summary_(*this);
}

double ratio_reporter::seconds_per_op(const std::string& name) const {
  auto it = seconds_.find(name);
  return it == seconds_.end() ? 0 : it->second;
}

double ratio_reporter::rate(const std::string& name) const {
  auto it = rate_.find(name);
  return it == rate_.end() ? 0 : it->second;
}

}  // namespace dlock::bench
