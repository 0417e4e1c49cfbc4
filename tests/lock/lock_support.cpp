// Where the lock tests find their worker program, and a crowd of them.
#include "lock_support.hpp"

namespace dlock::test {

crowd_result run_crowd(const std::vector<std::vector<std::string>>& runs, std::chrono::milliseconds limit) {
  std::vector<std::unique_ptr<worker>> crowd;
  for (auto& args : runs) crowd.push_back(std::make_unique<worker>(args));
  crowd_result result;
  for (auto& w : crowd) {
    bool complete = false;
    auto out = w->read_rest(limit, complete);
    result.history.add_lines(out);
    if (!complete) w->kill();
    const int status = w->wait();
    const bool done = out.size() >= 5 && out.compare(out.size() - 5, 5, "done\n") == 0;
    if (!complete || !done || status != 0) {
      ++result.failed;
      result.failures += "pid " + std::to_string(w->pid()) + " exit " + std::to_string(status) +
                         (complete ? "" : " (timed out)") + ", its last output: " +
                         out.substr(out.size() > 300 ? out.size() - 300 : 0) + "\n";
    }
  }
  return result;
}

std::string worker_path() {
#ifdef DLOCK_WORKER_PATH
  return DLOCK_WORKER_PATH;
#else
  return "./lock_worker";
#endif
}

}  // namespace dlock::test

#include "backend_fixtures.hpp"

namespace dlock::test {

redis_cluster& shared_cluster() {
  static redis_cluster cluster(cluster_options{.masters = 3, .replicas_per_master = 1});
  return cluster;
}

sentinel_deployment& shared_sentinel() {
  static sentinel_deployment deployment(sentinel_options{.replicas = 1, .sentinels = 1, .quorum = 1});
  return deployment;
}

}  // namespace dlock::test
