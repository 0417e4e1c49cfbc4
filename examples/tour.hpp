// What the tour's programs share: the shorthand they are written in, and the
// steps their failure stories repeat (running this program again as another
// client, reading a key's time to live, seeing whether a lock can be had).
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/child_process.hpp>
#include <support/polling.hpp>
#include "example_redis.hpp"

namespace dlock::examples::tour {

namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

/// This program again, as another process: with `--child-mode` and `args`,
/// which its main() reads to play the other client of the story.
inline test::child_process run_child_mode(const std::vector<std::string>& args) {
  std::vector<std::string> all{"--child-mode"};
  all.insert(all.end(), args.begin(), args.end());
  return test::child_process(std::filesystem::read_symlink("/proc/self/exe").string(), all);
}

/// `name`'s time to live in ms (-1: no expiry, -2: no key).
inline long long pttl(RedisBackend& redis, const std::string& name) {
  return redis.command(redis::request().push("PTTL", name)).integer;
}

/// Whether another client takes `lock` within `wait` (released at once).
template <class L>
bool taken_within(L& lock, ms wait) {
  auto hold = lock.try_acquire_for(wait);
  if (hold) hold->release();
  return hold.has_value();
}

}  // namespace dlock::examples::tour
