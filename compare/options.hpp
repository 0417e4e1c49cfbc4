// dlock-compare's command line: what to run, where, and how long.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <support/placement.hpp>

namespace dlock::compare {

/// How long each measurement runs.
enum class depth { quick, normal, thorough };

struct options {
  std::string redis_url;   ///< empty: start a private redis-server
  std::string filter;      ///< substring of combination names; empty: all
  std::string out_dir = "compare-out";
  std::string report_dir;  ///< where report.html goes; empty: out_dir
  depth how = depth::normal;
  double seconds = 0;      ///< each contention run's length; 0: the depth's
  /// Where the uncontended phase runs the server and this program (and
  /// redis-py): on one CPU by default (see support/placement.hpp).
  test::placement placement = test::placement::same;
  /// Which backends run: "single" (the main table, on one server) and
  /// "sentinel" (a master with two replicas and a sentinel, started by the
  /// run: each combination's uncontended cycle without and with replica
  /// acknowledgement, alternating with the same combination on one server,
  /// and seed 003's failover story as a fault row), "cluster" (see
  /// cluster.hpp), "tls" (see tls_phase.hpp), and "redlock3" and
  /// "redlock5" (see redlock_phase.hpp: one phase, with a deployment of
  /// each size named).
  std::vector<std::string> backends{"single"};
  bool list = false;
  bool help = false;
};

/// Parses argv (without argv[0]). On a bad option, returns nullopt and
/// sets `why` to one sentence naming it.
std::optional<options> parse_options(const std::vector<std::string_view>& args, std::string& why);

/// The usage text, for --help and after a bad option.
std::string usage();

/// Whether `name` passes the filter: a plain substring match, or `*` as a
/// wildcard for any run of characters ("hash/*/pubsub").
bool matches(std::string_view filter, std::string_view name);

}  // namespace dlock::compare
