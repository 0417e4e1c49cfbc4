// What a dlock-compare run is made of, apart from the locks: how much each
// depth measures, the progress line, the run's environment, the article
// each combination reproduces, the clean-up of a shared server, and the
// report's files.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/backend/redis.hpp>

#include "options.hpp"
#include "report.hpp"

namespace dlock::compare {

/// How much a run measures, by depth (--quick, the default, --thorough).
struct counts {
  int ping, cycles, pairs;   ///< pairs: alternating blocks of a row's cycles and redis-py's
  std::vector<int> workers;  ///< contention runs
  std::chrono::milliseconds contention, start_delay;
  std::chrono::milliseconds fault_lease;
  int failover_runs;  ///< runs of each act of seed 003's story (--backend sentinel)
  /// --backend redlock3/redlock5: runs of the killed-nodes row per size,
  /// votes with one node stalled per size, runs of each act of the
  /// restart story.
  int node_loss_runs = 1, stall_attempts = 10, restart_runs = 1;
  std::vector<int> held_locks = {2000};  ///< the renewal phase's numbers of held locks
  int renewal_pairs = 1;                 ///< its alternating pairs (batched, one call per lock) per number
};
counts counts_for(const options& o);

/// The article algorithm a combination reproduces (docs/algorithms.md
/// names them); "custom" for a policy this table does not know.
std::string reproduces(std::string_view ownership, std::string_view renewal);

/// Whether `list` holds `what`.
bool has(const std::vector<std::string>& list, const std::string& what);

/// What the run knows of itself before it measures: CPUs, compiler, dlock's
/// version and commit, the depth.
environment base_environment(const options& o);

/// A field of the server's INFO `section` ("unknown" when absent).
std::string info_field(RedisBackend& redis, const std::string& section, const std::string& field);

/// Deletes every key of the run on a shared server: the locks, named
/// `prefix...`, and their companion keys, named `{prefix...}:...` so that
/// they share the lock's cluster slot. Returns how many it deleted.
std::size_t delete_keys(RedisBackend& redis, const std::string& prefix);

/// Writes `json` to DIR/compare.json and says so on stderr.
void write_json(const std::string& out_dir, const std::string& json);

/// A script of dlock-compare's (`name`): beside the program `self` (the
/// build copies it there), or in share/dlock when installed; empty if
/// neither has it.
std::filesystem::path find_beside(const std::filesystem::path& self, const std::string& name);

/// Draws OUT_DIR/compare.json as PAGE_DIR/report.html with report_page.py
/// (Debian's /usr/bin/python3) and says where on stderr; returns false,
/// having said why on stderr, when it could not (the run's table and JSON
/// stand without it).
bool write_report(const std::filesystem::path& self, const std::string& out_dir, const std::string& page_dir);

/// Progress on stderr: what runs now, the time so far, and an estimate of
/// what is left (from the average so far).
class progress {
 public:
  explicit progress(std::size_t total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  void step(const std::string& what);

 private:
  std::size_t total_, done_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dlock::compare
