// What a dlock-compare run is made of, apart from the locks (see
// run_plan.hpp).
#include "run_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <support/child_process.hpp>

#include "build_info.hpp"

namespace dlock::compare {

counts counts_for(const options& o) {
  using std::chrono::milliseconds;
  counts n;
  switch (o.how) {
    case depth::quick: n = {300, 100, 3, {2, 8}, milliseconds(250), milliseconds(200), milliseconds(300), 1}; break;
    case depth::thorough:
      n = {20000, 5000, 5, {2, 8, 32, 128}, milliseconds(3000), milliseconds(500), milliseconds(2000), 20};
      break;
    default: n = {3000, 1000, 5, {2, 8, 32}, milliseconds(1000), milliseconds(400), milliseconds(1000), 3}; break;
  }
  if (o.how != depth::quick) n.held_locks = {2000, 10000}, n.renewal_pairs = o.how == depth::thorough ? 3 : 2;
  if (o.how != depth::quick) n.node_loss_runs = o.how == depth::thorough ? 20 : 5;
  if (o.how != depth::quick) n.stall_attempts = o.how == depth::thorough ? 200 : 50;
  if (o.how != depth::quick) n.restart_runs = 20;
  if (o.seconds > 0) n.contention = milliseconds(static_cast<long long>(o.seconds * 1000 + 0.5));
  return n;
}

std::string reproduces(std::string_view ownership, std::string_view renewal) {
  if (ownership == "setnx") return renewal == "none" ? "A1" : "A1b";
  if (ownership == "token") return renewal == "none" ? "A2n" : renewal == "fixed" ? "A2" : "A2+watchdog";
  if (ownership == "hash") return renewal == "watchdog" ? "A4" : "A4 fixed lease";
  if (ownership == "getset") return "A3";
  if (ownership == "naive") return "A3n";
  if (ownership == "queue") return renewal == "watchdog" ? "FIFO+watchdog" : "FIFO";
  if (ownership == "rw") return renewal == "watchdog" ? "RW+watchdog" : "RW";
  if (ownership == "semaphore") return renewal == "none" ? "S without a lease" : renewal == "fixed" ? "S" : "S+watchdog";
  return "custom";
}

bool has(const std::vector<std::string>& list, const std::string& what) {
  return std::find(list.begin(), list.end(), what) != list.end();
}

namespace {

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "g++ " __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

environment base_environment(const options& o) {
  environment env;
  env.cpu_count = std::thread::hardware_concurrency();
  env.compiler = compiler();
  env.dlock_version = DLOCK_VERSION;
  env.git_commit = git_commit();
  env.optimized = DLOCK_MEASURED_OPTIMIZATION != 0;
  env.depth = o.how == depth::quick ? "quick" : o.how == depth::thorough ? "thorough" : "normal";
  return env;
}

std::string info_field(RedisBackend& redis, const std::string& section, const std::string& field) {
  auto text = redis.command(redis::request().push("INFO", section)).str;
  auto at = text.find(field + ":");
  if (at == std::string::npos) return "unknown";
  auto end = text.find_first_of("\r\n", at);
  return text.substr(at + field.size() + 1, end - at - field.size() - 1);
}

std::size_t delete_keys(RedisBackend& redis, const std::string& prefix) {
  std::size_t deleted = 0;
  for (const auto& pattern : {prefix + "*", "{" + prefix + "*"}) {
    std::string cursor = "0";
    do {
      auto r = redis.command(redis::request().push("SCAN", cursor, "MATCH", pattern, "COUNT", 1000));
      if (r.elements.size() != 2) throw std::runtime_error("SCAN answered with something other than [cursor, keys]");
      cursor = r.elements[0].str;
      for (auto& k : r.elements[1].elements)
        deleted += static_cast<std::size_t>(redis.command(redis::request().push("DEL", k.str)).integer);
    } while (cursor != "0");
  }
  return deleted;
}

void write_json(const std::string& out_dir, const std::string& json) {
  std::filesystem::create_directories(out_dir);
  auto path = std::filesystem::path(out_dir) / "compare.json";
  std::ofstream(path) << json;
  std::fflush(stdout);  // the table first, when both go to one file
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

std::filesystem::path find_beside(const std::filesystem::path& self, const std::string& name) {
  auto dir = self.parent_path();
  for (auto p : {dir / name, dir.parent_path() / "share" / "dlock" / name})
    if (std::filesystem::exists(p)) return p;
  return {};
}

bool write_report(const std::filesystem::path& self, const std::string& out_dir, const std::string& page_dir) {
  auto script = find_beside(self, "report_page.py");
  if (script.empty()) {
    std::fprintf(stderr, "no report page: report_page.py is not beside %s\n", self.c_str());
    return false;
  }
  std::error_code ec;
  std::filesystem::create_directories(page_dir, ec);
  const auto json = std::filesystem::path(out_dir) / "compare.json";
  const auto page = std::filesystem::path(page_dir) / "report.html";
  test::child_process child("/usr/bin/python3", {script.string(), json.string(), page.string()});
  bool complete = false;
  auto out = child.read_rest(std::chrono::minutes(5), complete);  // the plots' limit is 4
  if (!complete) child.kill();
  const int rc = child.wait();
  if (!complete || rc != 0) {
    std::fprintf(stderr, "no report page: report_page.py %s (exit %d)%s%s\n", complete ? "failed" : "timed out", rc,
                 out.empty() ? "" : ": ", out.c_str());
    return false;
  }
  std::fprintf(stderr, "wrote %s\n", page.c_str());
  return true;
}

void progress::step(const std::string& what) {
  const std::size_t i = done_++;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double left = i ? elapsed / static_cast<double>(i) * static_cast<double>(total_ - i) : 0;
  std::fprintf(stderr, "[%zu/%zu] %s (%.1f s elapsed%s)\n", i + 1, total_, what.c_str(), elapsed,
               i ? (", about " + std::to_string(static_cast<int>(left + 0.5)) + " s left").c_str() : "");
}

}  // namespace dlock::compare
