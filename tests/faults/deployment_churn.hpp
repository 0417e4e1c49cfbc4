// The deployments' own faults in the fault suite (docs/faults.md): a
// crowd of lock_worker processes churns while the test fails the
// deployment over or moves its slots, then the checker's verdict over the
// hold history, and the errors sorted into those the fault explains and
// the rest (which fail the test).
#pragma once

#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>
#include <vector>

#include "fault_scenarios_server.hpp"

namespace dlock::test::faults {

/// What one churn through a deployment's fault showed.
struct deployment_verdict {
  churn_log log;
  long long after = 0;             ///< holds begun after `last_fault`
  std::string explained;           ///< "<n> <code>, ..." of the errors the fault explains
  std::vector<std::string> other;  ///< the errors it does not
};

/// Reads the crowd's logs: the holds begun after `last_fault`
/// (monotonic_ns), and the errors of the codes in `explained` set apart
/// (outcome_unknown, no_quorum and not_acknowledged are apart already:
/// churn_log::expected).
inline deployment_verdict read_deployment_churn(const churn_crowd& crowd, std::int64_t last_fault,
                                                std::initializer_list<error> explained) {
  deployment_verdict v{crowd.log(), 0, {}, {}};
  for (auto& s : v.log.history.spans()) v.after += s.start_ns > last_fault;
  v.other = v.log.errors;
  // "... @<monotonic_ns> acquire": when, counted from the last fault.
  for (auto& line : v.other)
    if (auto at = line.rfind(" @"); at != std::string::npos) {
      const auto ns = std::stoll(line.substr(at + 2));
      line = line.substr(0, at) + " (" + line.substr(line.find(' ', at + 2) + 1) + ", " +
             std::to_string((ns - last_fault) / 1'000'000) + " ms after the last fault)";
    }
  for (auto code : explained) {
    if (auto n = take_out(v.other, code)) {
      auto words = make_error_code(code).message();  // "lease lost: the lock is ...": its first words
      words = words.substr(0, words.find_first_of(":;"));
      v.explained += (v.explained.empty() ? "" : ", ") + std::to_string(n) + " " + words;
    }
  }
  return v;
}

/// The checks every deployment fault ends with: every worker done, no hold
/// left open, holds after the last fault, no error but the explained ones,
/// and no overlap.
inline void check_deployment_churn(const deployment_verdict& v, int workers) {
  std::string all;
  for (auto& e : v.other) all += e + "\n";
  INFO(v.other.size() << " errors the fault does not explain:\n" << all);
  CHECK(v.other.empty());
  CHECK(v.log.done == workers);
  CHECK(v.log.open.empty());
  CHECK(v.after > 0);
  auto overlaps = v.log.history.overlaps();
  INFO(describe(overlaps));
  CHECK(overlaps.empty());
}

}  // namespace dlock::test::faults
