#include "reference.hpp"
#include "run_plan.hpp"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string_view>

#include <support/child_process.hpp>

namespace dlock::compare {

namespace {

// Debian's interpreter, where python3-redis lives: another python3 may come
// first on PATH without the module.
constexpr const char* python = "/usr/bin/python3";

std::filesystem::path find_script(const std::filesystem::path& self) { return find_beside(self, "redis_py_lock.py"); }

// Runs the script with `args` to its end; its output, and its exit status in `rc`.
std::string run_script(const std::filesystem::path& script, std::vector<std::string> args, int& rc) {
  args.insert(args.begin(), script.string());
  test::child_process child(python, args);
  bool complete = false;
  auto out = child.read_rest(std::chrono::minutes(2), complete);
  if (!complete) child.kill();
  rc = complete ? child.wait() : -1;
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

reference_result start_redis_py(const std::filesystem::path& self, const reference_plan& plan,
                                std::unique_ptr<test::redis_py_lock>& lock) {
  reference_result ref;
  auto& row = ref.row;
  row.name = "redis-py/Lock";
  row.ownership = "token";  // SET NX PX with a random token, a compare-and-delete script
  row.renewal = "fixed";    // its timeout: 30 s here
  row.wait = "sleep";       // 0.1 s between tries, its default
  row.reproduces = "A2 (Python)";
  auto script = find_script(self);
  if (script.empty()) {
    ref.skipped = "redis_py_lock.py is not beside " + self.string();
    return ref;
  }
  if (!std::filesystem::exists(python)) {
    ref.skipped = std::string("no ") + python + " (Debian's python3 and python3-redis; ./dev installs them)";
    return ref;
  }
  int rc = 0;
  ref.version = run_script(script, {"version"}, rc);
  if (rc != 0 || ref.version.empty()) {
    ref.skipped = std::string(python) + " has no redis module (Debian's python3-redis; ./dev installs it)";
    return ref;
  }
  try {
    lock = std::make_unique<test::redis_py_lock>(python, script.string(), plan.url, plan.prefix + "redis-py:uncontended");
  } catch (const std::exception& e) {
    // Not the comparison's failure: redis-py may not read a URL dlock reads.
    ref.skipped = e.what();
  }
  return ref;
}

void contend_redis_py(RedisBackend& redis, const std::filesystem::path& self, const reference_plan& plan,
                      reference_result& ref, const std::function<void(const std::string&)>& step) {
  auto script = find_script(self).string();
  auto& row = ref.row;
  for (int w : plan.workers) {
    step("redis-py/Lock: " + std::to_string(w) + " workers in 2 processes for " +
         std::to_string(plan.times.duration.count()) + " ms");
    const auto lock = plan.prefix + "redis-py:contended:" + std::to_string(w);
    auto launch = [&](int p, int threads, std::int64_t start, std::int64_t duration) {
      return std::make_unique<test::child_process>(
          python, std::vector<std::string>{script, "worker", plan.url, lock, lock + ":counter",
                                           "p" + std::to_string(p), std::to_string(threads), std::to_string(start),
                                           std::to_string(duration)});
    };
    row.contention.push_back(contend(redis, row.name, lock, lock + ":counter", w, plan.times, launch, plan.ping_us));
  }
}

}  // namespace dlock::compare
