// dlock-soak: the fault suite's checker for as long as you like. It starts
// a private deployment (one server, Sentinel, a cluster or a Redlock
// quorum) on free loopback ports, and runs rounds: in each, churning
// lock_worker processes take a few locks of one kind at random and log
// every hold (tests/lock/churn.hpp), while one fault from the mix strikes.
// After each round it reads the logs into a hold history and asks the
// checker for overlaps, and checks that no lock key is left without an
// expiry. It prints each round as it ends, and exits 1 on any violation:
// an overlap, a worker that never finished, a key without expiry.
//
// A hold's span ends when its holder let go or at its loss deadline,
// whichever came first: a holder stopped past its lease (SIGSTOP) overlaps
// the next one, which the lock cannot prevent but does signal; what it
// promises, and what is checked, is that nobody else gets in before the
// signal.
//
//   dlock-soak [--backend single|sentinel|cluster|redlock] [--seconds N]
//              [--faults kill,pause,cut,restart,failover|none]
//              [--locks COMBINATION,...] [--workers N] [--history FILE]
//
// Faults (each backend takes those it can): kill (SIGKILL a worker; its
// open hold ends at the kill), pause (SIGSTOP a worker for a lease and a
// half), cut (one server: the proxy in front of it drops every
// connection), restart (one server, or a Redlock node: SIGKILL and start
// again, with appendfsync always), failover (Sentinel, Cluster: the master
// is killed, a replica promoted, the old master restarted as a replica).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <support/fault_proxy.hpp>
#include <support/redis_server.hpp>
#include <support/sentinel_deployment.hpp>

#include "fault_support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace dlock::test;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

// Servers that keep what they acknowledged across a restart.
server_options persistent() {
  server_options o;
  o.extra_args = {"--appendonly", "yes", "--appendfsync", "always"};
  return o;
}

// A deployment the soak runs on, and the faults it can take.
struct target {
  virtual ~target() = default;
  virtual std::string spec() const = 0;  // lock_worker's first argument
  /// A command on the server that holds `key` (redis-cli's output).
  virtual std::string command(const std::string& key, const std::vector<std::string>& args) = 0;
  virtual std::set<std::string> faults() const = 0;
  /// Injects a server-side fault; says what it did.
  virtual std::string inject(const std::string& fault, std::mt19937& rng) = 0;
  virtual std::vector<std::string> locks() const {
    return {"token/watchdog/spin", "hash/watchdog/pubsub", "queue/watchdog/handoff", "semaphore/watchdog/pubsub",
            "rw/watchdog/pubsub"};
  }
};

struct single : target {
  redis_server server{persistent()};
  fault_proxy proxy{server.port()};
  std::string spec() const override { return proxy.url(); }
  std::string command(const std::string&, const std::vector<std::string>& args) override {
    return server.command(args);
  }
  std::set<std::string> faults() const override { return {"kill", "pause", "cut", "restart"}; }
  std::string inject(const std::string& fault, std::mt19937&) override {
    if (fault == "cut") {
      proxy.cut();
      return "every connection cut";
    }
    server.restart();
    return "server restarted";
  }
};

struct sentinel : target {
  sentinel_deployment d{sentinel_options{.replicas = 2, .sentinels = 1, .quorum = 1, .proxied = false}};
  std::string spec() const override { return d.url(); }
  std::string command(const std::string&, const std::vector<std::string>& args) override {
    return d.master().command(args);
  }
  std::set<std::string> faults() const override { return {"kill", "pause", "failover"}; }
  std::string inject(const std::string&, std::mt19937&) override {
    auto& old = d.master();
    const auto old_port = old.port();
    old.kill();
    const auto now = d.wait_for_new_master(old_port);
    old.start();  // Sentinel makes it a replica of the new master
    return "master " + std::to_string(old_port) + " killed, " + std::to_string(now) + " promoted";
  }
};

struct cluster : target {
  redis_cluster c{cluster_options{.masters = 3, .replicas_per_master = 1}};
  std::string spec() const override { return "cluster:" + c.url(); }
  std::string command(const std::string& key, const std::vector<std::string>& args) override {
    auto slot = static_cast<std::uint16_t>(dlock::detail::key_slot(key));
    return c.node(c.master_of_slot(slot)).command(args);
  }
  std::set<std::string> faults() const override { return {"kill", "pause", "failover"}; }
  std::string inject(const std::string&, std::mt19937& rng) override {
    auto masters = c.masters();
    const auto victim = masters[std::uniform_int_distribution<std::size_t>(0, masters.size() - 1)(rng)];
    const auto promoted = c.kill_master_and_wait(victim);
    c.node(victim).start();  // it rejoins as a replica of the promoted node
    return "master node " + std::to_string(victim) + " killed, node " + std::to_string(promoted) + " promoted";
  }
};

struct redlock : target {
  std::vector<std::unique_ptr<redis_server>> nodes;
  redlock() {
    for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<redis_server>(persistent()));
  }
  std::string spec() const override {
    std::string out = "redlock:redis://";
    for (std::size_t i = 0; i < nodes.size(); ++i) out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(nodes[i]->port());
    return out;
  }
  std::string command(const std::string&, const std::vector<std::string>& args) override {
    return nodes.front()->command(args);
  }
  std::set<std::string> faults() const override { return {"kill", "pause", "restart"}; }
  std::string inject(const std::string&, std::mt19937& rng) override {
    const auto i = std::uniform_int_distribution<std::size_t>(0, nodes.size() - 1)(rng);
    nodes[i]->restart();
    return "node " + std::to_string(i) + " restarted";
  }
  std::vector<std::string> locks() const override { return {"token/watchdog/spin", "hash/watchdog/spin"}; }
};

struct options {
  std::string backend = "single";
  long long seconds = 30;
  std::vector<std::string> faults;  // empty: every fault the backend takes
  bool no_faults = false;
  std::vector<std::string> locks;   // empty: the backend's
  int workers = 3;
  std::string history;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "dlock-soak: %s\n"
               "usage: dlock-soak [--backend single|sentinel|cluster|redlock] [--seconds N]\n"
               "                  [--faults kill,pause,cut,restart,failover|none] [--locks COMBINATION,...]\n"
               "                  [--workers N] [--history FILE]\n",
               why);
  return 2;
}

std::unique_ptr<target> make_target(const std::string& backend) {
  if (backend == "single") return std::make_unique<single>();
  if (backend == "sentinel") return std::make_unique<sentinel>();
  if (backend == "cluster") return std::make_unique<cluster>();
  if (backend == "redlock") return std::make_unique<redlock>();
  return nullptr;
}

// What one round found.
struct round_result {
  long long holds = 0;
  std::size_t overlaps = 0;
  int unfinished = 0;
  int keys_without_expiry = 0;
  std::map<std::string, int> errors;  // by message
  std::string fault;
  bool caught_a_hold = false;  // a kill or pause struck a worker inside a hold
};

// What an "error <lock> <worker> <code> <message> @<ns> <step>" line says:
// its message (the error's words), up to its first '(' (a server's own
// words follow) or the " @" of its time.
std::string code_of(const std::string& line) {
  std::istringstream words(line);
  std::string kind, lock, worker, code, message;
  words >> kind >> lock >> worker >> code;
  std::getline(words >> std::ws, message);
  message = message.substr(0, std::min(message.find(" ("), message.rfind(" @")));
  return "\"" + message + "\"";
}

// Whether the log at `path` ends inside a hold (its last line is "took").
bool inside_a_hold(const std::string& path) {
  std::ifstream in(path);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last.rfind("took ", 0) == 0;
}

round_result run_round(target& t, const options& opt, const std::string& lock, const std::string& fault, int round,
                       std::mt19937& rng, std::ofstream* history) {
  round_result out;
  const auto lease = milliseconds(2000);
  const auto length = milliseconds(6000);
  log_folder logs;
  churn_plan plan{.prefix = "soak" + std::to_string(round), .locks = 2, .lease = lease, .length = length, .log = {},
                  .work = milliseconds(30)};
  std::vector<std::unique_ptr<worker>> workers;
  std::vector<std::string> paths;
  for (int i = 0; i < opt.workers; ++i) {
    plan.log = logs.file("w" + std::to_string(i) + ".log");
    paths.push_back(plan.log);
    workers.push_back(std::make_unique<worker>(
        std::vector<std::string>{"churn", t.spec(), lock, plan.spec(), std::to_string(length.count())}));
  }
  for (auto& w : workers)
    if (w->read_line() != "started") ++out.unfinished;
  // One fault, a third of the way in.
  std::this_thread::sleep_for(length / 3);
  std::vector<hold_span> killed;
  const auto victim = std::uniform_int_distribution<int>(0, opt.workers - 1)(rng);
  if (fault == "kill") {
    out.caught_a_hold = inside_a_hold(paths[victim]);
    const auto at = monotonic_ns();
    ::kill(workers[victim]->pid(), SIGKILL);
    workers[victim]->wait();
    for (auto& s : read_churn_logs({paths[victim]}).open) killed.push_back(hold_span{s.lock, s.worker, s.start_ns, at, false});
    out.fault = "kill: worker " + std::to_string(victim) + (out.caught_a_hold ? " inside a hold" : "");
  } else if (fault == "pause") {
    ::kill(workers[victim]->pid(), SIGSTOP);
    out.caught_a_hold = inside_a_hold(paths[victim]);
    std::this_thread::sleep_for(lease * 3 / 2);
    ::kill(workers[victim]->pid(), SIGCONT);
    out.fault = "pause: worker " + std::to_string(victim) + " for " + std::to_string((lease * 3 / 2).count()) + " ms" +
                (out.caught_a_hold ? " inside a hold" : "");
  } else if (fault != "none") {
    out.fault = fault + ": " + t.inject(fault, rng);
  } else {
    out.fault = "none";
  }
  for (int i = 0; i < opt.workers; ++i) {
    if (fault == "kill" && i == victim) continue;
    bool complete = false;
    auto rest = workers[i]->read_rest(length + 60s, complete);
    if (!complete) {
      workers[i]->kill();
      ++out.unfinished;
    } else if (workers[i]->wait() != 0 || rest.find("done") == std::string::npos) {
      ++out.unfinished;
    }
  }
  auto log = read_churn_logs(paths);
  for (auto& s : killed) log.history.add(s);
  out.holds = log.holds;
  out.overlaps = log.history.overlaps().size();
  for (auto& o : log.history.overlaps())
    std::printf("  OVERLAP %s  and  %s (%lld ns)\n", o.earlier.format().c_str(), o.later.format().c_str(),
                static_cast<long long>(o.overlap_ns()));
  for (auto* list : {&log.errors, &log.expected})
    for (auto& e : *list) ++out.errors[code_of(e)];
  if (history)
    for (auto& s : log.history.spans()) *history << s.format() << '\n';
  // Nothing is left without an expiry: a lock held for ever.
  for (int i = 0; i < plan.locks; ++i) {
    const auto name = plan.lock_name(i);
    std::string pttl;
    try {
      pttl = t.command(name, {"PTTL", name});
    } catch (const std::exception& e) {
      pttl = e.what();
    }
    if (pttl == "-1") ++out.keys_without_expiry;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("missing a value after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--backend") opt.backend = v;
    else if (a == "--seconds") opt.seconds = std::atoll(v.c_str());
    else if (a == "--faults") {
      opt.no_faults = v == "none";
      if (!opt.no_faults) opt.faults = split(v);
    } else if (a == "--locks") opt.locks = split(v);
    else if (a == "--workers") opt.workers = std::atoi(v.c_str());
    else if (a == "--history") opt.history = v;
    else return usage(("unknown option " + a).c_str());
  }
  if (opt.seconds <= 0 || opt.workers < 2) return usage("--seconds must be positive and --workers at least 2");
  std::unique_ptr<target> t;
  try {
    t = make_target(opt.backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlock-soak: could not start the %s deployment: %s\n", opt.backend.c_str(), e.what());
    return 2;
  }
  if (!t) return usage(("unknown backend " + opt.backend).c_str());
  const auto can = t->faults();
  std::vector<std::string> faults = opt.no_faults ? std::vector<std::string>{"none"}
                                    : opt.faults.empty() ? std::vector<std::string>(can.begin(), can.end())
                                                         : opt.faults;
  for (auto& f : faults)
    if (f != "none" && !can.count(f)) return usage(("the " + opt.backend + " backend cannot take fault " + f).c_str());
  const auto locks = opt.locks.empty() ? t->locks() : opt.locks;
  std::unique_ptr<std::ofstream> history;
  if (!opt.history.empty()) history = std::make_unique<std::ofstream>(opt.history);

  std::printf("dlock-soak: %s (%s), %lld s, %d workers, faults %s\n", opt.backend.c_str(), t->spec().c_str(),
              opt.seconds, opt.workers, [&] {
                std::string s;
                for (auto& f : faults) s += (s.empty() ? "" : ",") + f;
                return s;
              }().c_str());
  std::fflush(stdout);
  std::mt19937 rng(std::random_device{}());
  const auto start = clock_type::now();
  long long holds = 0, violations = 0;
  std::map<std::string, int> injected, errors;
  int caught = 0;
  for (int round = 0; clock_type::now() - start < std::chrono::seconds(opt.seconds); ++round) {
    const auto& lock = locks[static_cast<std::size_t>(round) % locks.size()];
    const auto& fault = faults[static_cast<std::size_t>(round) % faults.size()];
    round_result r;
    try {
      r = run_round(*t, opt, lock, fault, round, rng, history.get());
    } catch (const std::exception& e) {
      std::printf("round %d %s: the harness failed: %s\n", round, lock.c_str(), e.what());
      ++violations;
      break;
    }
    holds += r.holds;
    ++injected[fault];
    caught += r.caught_a_hold;
    const long long bad = static_cast<long long>(r.overlaps) + r.unfinished + r.keys_without_expiry;
    violations += bad;
    std::string errs;
    for (auto& [code, n] : r.errors) {
      errs += (errs.empty() ? "" : ", ") + std::to_string(n) + " " + code;
      errors[code] += n;
    }
    std::printf("round %d %-26s %-60s %5lld holds, %zu overlaps, %d unfinished, %d keys without expiry%s%s%s\n",
                round, lock.c_str(), r.fault.c_str(), r.holds, r.overlaps, r.unfinished, r.keys_without_expiry,
                errs.empty() ? "" : "; errors: ", errs.c_str(), bad ? "  VIOLATION" : "");
    std::fflush(stdout);
  }
  const auto took = std::chrono::duration_cast<std::chrono::seconds>(clock_type::now() - start).count();
  std::string faults_done, errors_seen;
  for (auto& [f, n] : injected) faults_done += (faults_done.empty() ? "" : ", ") + std::to_string(n) + " " + f;
  for (auto& [c, n] : errors) errors_seen += (errors_seen.empty() ? "" : ", ") + std::to_string(n) + " " + c;
  std::printf("dlock-soak: %s, %lld s: %lld holds checked, faults %s (%d kills or pauses inside a hold), errors %s; "
              "%lld violations\n",
              opt.backend.c_str(), static_cast<long long>(took), holds, faults_done.c_str(), caught,
              errors_seen.empty() ? "none" : errors_seen.c_str(), violations);
  return violations == 0 ? 0 : 1;
}
