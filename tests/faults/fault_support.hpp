// The fault suite's harness: churning lock_worker processes (see
// tests/lock/churn.hpp), their logs read back into one hold history, and
// the checker's verdict over it.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <support/hold_history.hpp>

#include "../lock/churn.hpp"
#include "../lock/lock_support.hpp"

namespace dlock::test {

/// What the churn logs say: every hold that ended, and each open one (a
/// "took" line without its "hold" line: its worker was killed in it).
struct churn_log {
  hold_history history;
  long long holds = 0;                  ///< holds that ended
  std::vector<hold_span> open;          ///< begun, never ended (end_ns 0)
  std::vector<std::string> errors;      ///< "error" lines, but the expected ones
  std::vector<std::string> expected;    ///< errors a loaded machine may cause (see read_churn_logs)
  int done = 0;                         ///< workers that logged "done"
};

/// Reads the logs at `paths`. outcome_unknown, no_quorum and
/// not_acknowledged (a reply, a quorum's, or the replicas' WAIT, later than
/// its timeout: Redlock's nodes have 500 ms, WAIT 1 s by default) are
/// errors the library documents for a loaded machine, kept apart from the
/// others; the checker's verdict covers the holds either way.
inline churn_log read_churn_logs(const std::vector<std::string>& paths) {
  const std::string unknown = error_code_word(make_error_code(error::outcome_unknown));
  const std::string no_quorum = error_code_word(make_error_code(error::no_quorum));
  const std::string unacknowledged = error_code_word(make_error_code(error::not_acknowledged));
  churn_log out;
  for (auto& path : paths) {
    std::ifstream in(path);
    std::map<std::string, hold_span> began;  // by lock and worker
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string kind, lock, worker;
      words >> kind >> lock >> worker;
      if (kind == "took") {
        hold_span s{lock, worker, 0, 0, false};
        words >> s.start_ns;
        began[lock + " " + worker] = s;
      } else if (auto span = hold_span::parse(line)) {
        began.erase(span->lock + " " + span->worker);
        out.history.add(*span);
        ++out.holds;
      } else if (kind == "error") {
        std::string code;
        words >> code;
        (code == unknown || code == no_quorum || code == unacknowledged ? out.expected : out.errors).push_back(line);
      } else if (kind == "done") {
        ++out.done;
      }
    }
    for (auto& [key, s] : began) out.open.push_back(s);
  }
  return out;
}

/// A folder of its own for a test's logs, removed at the end.
class log_folder {
 public:
  log_folder() {
    char tmpl[] = "/tmp/dlock-faults-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path_ = tmpl;
  }
  ~log_folder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  log_folder(const log_folder&) = delete;
  log_folder& operator=(const log_folder&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Churning lock_worker processes of one combination, started at once.
class churn_crowd {
 public:
  /// `count` workers on `spec` (a fixture's worker_spec()), each with
  /// `plan` and its own log file in `logs`.
  churn_crowd(const log_folder& logs, const std::string& spec, const std::string& combination, churn_plan plan,
              int count) {
    std::string stem = plan.prefix;  // a lock name may hold '/' and ':'
    for (auto& c : stem)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    for (int i = 0; i < count; ++i) {
      plan.log = logs.file(stem + "-" + std::to_string(i) + ".log");
      paths_.push_back(plan.log);
      workers_.push_back(std::make_unique<worker>(std::vector<std::string>{
          "churn", spec, combination, plan.spec(), std::to_string(plan.length.count())}));
    }
    for (auto& w : workers_) started_ += w->read_line() == "started";
  }
  /// How many said "started".
  int started() const { return started_; }
  /// Waits for every worker to end (each within `limit`); how many ended
  /// with "done" and status 0.
  int finish(std::chrono::milliseconds limit) {
    int ok = 0;
    for (auto& w : workers_) {
      bool complete = false;
      auto rest = w->read_rest(limit, complete);
      if (!complete) w->kill();
      ok += complete && w->wait() == 0 && rest.find("done") != std::string::npos;
    }
    return ok;
  }
  churn_log log() const { return read_churn_logs(paths_); }

 private:
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<worker>> workers_;
  int started_ = 0;
};

/// The checker's verdict, as Catch2 prints it: every overlap, one a line.
inline std::string describe(const std::vector<overlap>& overlaps) {
  std::string out;
  for (auto& o : overlaps)
    out += o.earlier.format() + "  overlapped by  " + o.later.format() + " (" + std::to_string(o.overlap_ns()) +
           " ns)\n";
  return out;
}

}  // namespace dlock::test
