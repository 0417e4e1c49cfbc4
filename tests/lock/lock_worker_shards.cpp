// lock_worker on examples::ShardedBackend: every combination (see
// lock_worker.cpp).
#include <vector>

#include <dlock/combinations.hpp>

#include "../../examples/sharded_backend.hpp"
#include "shard_instances.hpp"  // its locks, compiled once
#include "lock_worker.hpp"

namespace dlock::test::worker_process {

// `spec`: "<url>,<url>,...", the same servers as the test's ShardedBackend.
int on_shards(const std::string& spec, char** argv) {
  std::vector<std::string> urls;
  for (std::size_t at = 0; at <= spec.size();) {
    auto comma = spec.find(',', at);
    if (comma == std::string::npos) comma = spec.size();
    urls.push_back(spec.substr(at, comma - at));
    at = comma + 1;
  }
  examples::ShardedBackend backend(urls);
  return run(
      backend, [&](const std::string& key) -> RedisBackend& { return backend.shard_for(key); }, argv,
      combinations::all<examples::ShardedBackend>());
}

}  // namespace dlock::test::worker_process
