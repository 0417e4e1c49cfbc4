#include "reference.hpp"

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

std::filesystem::path find_script(const std::filesystem::path& self) {
  auto dir = self.parent_path();
  for (auto p : {dir / "redis_py_lock.py", dir.parent_path() / "share" / "dlock" / "redis_py_lock.py"})
    if (std::filesystem::exists(p)) return p;
  return {};
}

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

void add_pings(RedisBackend& redis, int n, std::vector<double>& into) {
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    redis.command(redis::request().push("PING"));
    into.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
}

}  // namespace

reference_result measure_redis_py(RedisBackend& redis, const std::filesystem::path& self, const reference_plan& plan,
                                  const std::function<void(const std::string&)>& step) {
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

  // Uncontended: its ratio is taken against PINGs just before and after.
  step("redis-py/Lock " + ref.version + ": uncontended cycle, " + std::to_string(plan.cycles) + " samples");
  std::vector<double> pings, samples;
  add_pings(redis, plan.pings, pings);
  auto out = run_script(script, {"uncontended", plan.url, plan.prefix + "redis-py:uncontended", std::to_string(plan.cycles)}, rc);
  add_pings(redis, plan.pings, pings);
  for (std::string_view text = out; !text.empty();) {
    auto eol = text.find('\n');
    auto line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (line.substr(0, 7) == "sample ") samples.push_back(std::stod(std::string(line.substr(7))));
  }
  if (rc != 0 || samples.size() != static_cast<std::size_t>(plan.cycles)) {
    // Not the comparison's failure: redis-py may not read a URL dlock reads.
    ref.skipped = "its uncontended run exited with " + std::to_string(rc) + " after " + std::to_string(samples.size()) +
                  " of " + std::to_string(plan.cycles) + " cycles";
    return ref;
  }
  row.uncontended = percentiles(samples);
  row.ping = percentiles(pings);

  for (int w : plan.workers) {
    step("redis-py/Lock: " + std::to_string(w) + " workers in 2 processes for " +
         std::to_string(plan.times.duration.count()) + " ms");
    const auto lock = plan.prefix + "redis-py:contended:" + std::to_string(w);
    auto launch = [&](int p, int threads, std::int64_t start, std::int64_t duration) {
      return std::make_unique<test::child_process>(
          python, std::vector<std::string>{script.string(), "worker", plan.url, lock, lock + ":counter",
                                           "p" + std::to_string(p), std::to_string(threads), std::to_string(start),
                                           std::to_string(duration)});
    };
    row.contention.push_back(contend(redis, row.name, lock, lock + ":counter", w, plan.times, launch, plan.ping_us));
  }
  return ref;
}

}  // namespace dlock::compare
