// Shared by the benchmark programs: the private server, the PING baseline
// measured in the same process, and a reporter that prints ratios.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include <dlock/backend/redis.hpp>
#include <support/redis_server.hpp>

namespace dlock::bench {

/// The server every benchmark of the run talks to: the URL given as the
/// first argument, or a private redis-server.
struct target {
  std::unique_ptr<test::redis_server> server;
  std::string url;
};
target& server_target();

/// Whether this program was compiled with the project's optimization; a
/// build that only tests the benchmarks (-Dmeasured_optimization=false,
/// ./dev test's) is not, and its figures are not dlock's.
bool optimized();
/// Says on stderr, once, when the program was built without optimization.
void warn_if_unoptimized();

/// Takes a redis:// or unix:// URL out of argv (anywhere among the
/// arguments) and uses that server; without one, starts a private
/// redis-server. Call before benchmark::ReportUnrecognizedArguments, which
/// would reject the URL.
void choose_server(int& argc, char** argv);

/// The least a client can do: a blocking socket (tcp or unix, with AUTH
/// when the URL has a password, SELECT when it names a database) that
/// writes PING and reads +PONG. Throws std::runtime_error if it cannot
/// connect.
class plain_socket {
 public:
  explicit plain_socket(const std::string& url);
  ~plain_socket();
  plain_socket(const plain_socket&) = delete;
  plain_socket& operator=(const plain_socket&) = delete;
  /// One PING round trip; false if the socket failed.
  bool ping();
  /// Writes `payload` (RESP commands) and reads until `lines` reply lines
  /// have come back (for replies of one line each: +OK, :n, -ERR, $-1).
  /// False if the socket failed or a reply was an error.
  bool exchange(const std::string& payload, int lines);

 private:
  bool send_line(const std::string& resp, const char* expect);
  int fd_ = -1;
};

/// The commands of one uncontended cycle, written on a plain_socket with
/// nothing around them: the floor under a client's cycle. Each loads its
/// scripts on construction and throws std::runtime_error if it cannot.
/// `cycle()` is false if a command failed.
class floor_cycle {
 public:
  enum class kind {
    token,     ///< ownership::Token's commands (SET NX PX + PTTL in one pipeline, its release script)
    redis_py,  ///< redis-py's Lock: SET NX PX, then a plain compare-and-delete script
    hash,      ///< ownership::ReentrantHash's (the default Lock<>): its two scripts
  };
  floor_cycle(const std::string& url, kind k, std::string name);
  bool cycle();

 private:
  plain_socket socket_;
  kind kind_;
  std::string name_, token_;
  long n_ = 0;
};

/// The median PING round trip (microseconds) on a plain_socket, measured
/// once per run on first use: every benchmark reports it as the counter
/// `ping_us`, and every ratio is in these.
double ping_us();

/// Sets the counters `ping_us` and `in_pings` (`seconds_per_op` as PING
/// round trips; not set when 0). Counters add up across threads: call it
/// from one thread of a threaded benchmark.
void report_ping(benchmark::State& state, double seconds_per_op);

/// One PING on a plain_socket: the unit every ratio is expressed in.
void ping_plain_socket(benchmark::State& state);

/// One PING through dlock's connection, with the io_context driven on the
/// calling thread (no thread hop).
void ping_round_trip(benchmark::State& state);

/// Collects items_per_second (or time per iteration) per benchmark name
/// (without its "/min_time:..." and "/real_time" parts; "/threads:N" stays) and lets `summary` print ratios at the end.
class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  explicit ratio_reporter(std::function<void(ratio_reporter&)> summary) : summary_(std::move(summary)) {}
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;

  /// Seconds per iteration of `name`, or 0 if it did not run.
  double seconds_per_op(const std::string& name) const;
  /// Items per second of `name`, or 0.
  double rate(const std::string& name) const;
  const std::map<std::string, double>& all_seconds() const { return seconds_; }

 private:
  std::function<void(ratio_reporter&)> summary_;
  std::map<std::string, double> seconds_, rate_;
};

}  // namespace dlock::bench
