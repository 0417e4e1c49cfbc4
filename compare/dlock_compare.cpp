// dlock-compare: every lock combination of the compile-time list, measured
// on one Redis (a private redis-server unless --redis is given), as a table
// on stdout and every figure in DIR/compare.json.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <dlock/combinations.hpp>
#include <dlock/detail/random.hpp>
#include <support/redis_server.hpp>

#include "measure.hpp"
#include "options.hpp"
#include "report.hpp"
#include "version.hpp"

namespace {

using namespace dlock::compare;

// The article algorithm a combination reproduces (docs/algorithms.md names
// them). A policy this table does not know is shown as a custom one.
std::string reproduces(std::string_view ownership, std::string_view renewal) {
  if (ownership == "setnx") return renewal == "none" ? "A1" : "A1b";
  if (ownership == "token") return renewal == "none" ? "A2n" : renewal == "fixed" ? "A2" : "A2+watchdog";
  if (ownership == "hash") return renewal == "watchdog" ? "A4" : "A4 fixed lease";
  if (ownership == "getset") return "A3";
  if (ownership == "naive") return "A3n";
  return "custom";
}

// The names of the combinations that pass the filter, in list order.
std::vector<std::string> selected(const options& o) {
  std::vector<std::string> names;
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (matches(o.filter, L::combination_name())) names.push_back(L::combination_name());
  });
  return names;
}

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "g++ " __VERSION__;
#else
  return "unknown";
#endif
}

std::string info_field(dlock::RedisBackend& redis, const std::string& section, const std::string& field) {
  auto text = redis.command(dlock::redis::request().push("INFO", section)).str;
  auto at = text.find(field + ":");
  if (at == std::string::npos) return "unknown";
  auto end = text.find_first_of("\r\n", at);
  return text.substr(at + field.size() + 1, end - at - field.size() - 1);
}

// Deletes every key of the run on a shared server: the locks, named
// `prefix...`, and their companion keys (release and acquire markers),
// named `{prefix...}:...` so that they share the lock's cluster slot.
// Returns how many it deleted.
std::size_t delete_keys(dlock::RedisBackend& redis, const std::string& prefix) {
  std::size_t deleted = 0;
  for (const auto& pattern : {prefix + "*", "{" + prefix + "*"}) {
    std::string cursor = "0";
    do {
      auto r = redis.command(dlock::redis::request().push("SCAN", cursor, "MATCH", pattern, "COUNT", 1000));
      if (r.elements.size() != 2) throw std::runtime_error("SCAN answered with something other than [cursor, keys]");
      cursor = r.elements[0].str;
      for (auto& k : r.elements[1].elements)
        deleted += static_cast<std::size_t>(redis.command(dlock::redis::request().push("DEL", k.str)).integer);
    } while (cursor != "0");
  }
  return deleted;
}

// Progress on stderr: what runs now, the time so far, and an estimate of
// what is left (from the average so far).
class progress {
 public:
  explicit progress(std::size_t total) : total_(total), start_(clock::now()) {}
  void step(std::size_t i, const std::string& what) const {
    double elapsed = std::chrono::duration<double>(clock::now() - start_).count();
    double left = i ? elapsed / static_cast<double>(i) * static_cast<double>(total_ - i) : 0;
    std::fprintf(stderr, "[%zu/%zu] %s (%.1f s elapsed%s)\n", i + 1, total_, what.c_str(), elapsed,
                 i ? (", about " + std::to_string(static_cast<int>(left + 0.5)) + " s left").c_str() : "");
  }

 private:
  std::size_t total_;
  clock::time_point start_;
};

struct counts {
  int ping, cycles;
};
counts counts_for(depth d) {
  switch (d) {
    case depth::quick: return {300, 100};
    case depth::thorough: return {20000, 5000};
    default: return {3000, 1000};
  }
}

int run(const options& o) {
  std::optional<dlock::test::redis_server> private_server;
  std::string url = o.redis_url, target = "private";
  if (url.empty()) {
    std::fprintf(stderr, "starting a private redis-server...\n");
    private_server.emplace();
    url = private_server->url();
  } else {
    std::error_code ec;
    std::string why;
    auto cfg = dlock::redis::parse_url(url, ec, &why);
    if (ec) throw std::runtime_error("--redis: " + why);
    target = cfg.describe();
  }
  dlock::RedisBackend redis(url);
  // Every key of the run lives under one prefix, deleted at the end.
  const std::string prefix = "dlock-compare:" + dlock::detail::random_hex(6) + ":";

  auto n = counts_for(o.how);
  environment env;
  env.redis_version = info_field(redis, "server", "redis_version");
  env.redis_target = target;
  env.cpu_count = std::thread::hardware_concurrency();
  env.compiler = compiler();
  env.dlock_version = DLOCK_VERSION;
  env.git_commit = DLOCK_GIT_COMMIT;
  env.depth = o.how == depth::quick ? "quick" : o.how == depth::thorough ? "thorough" : "normal";
  std::fprintf(stderr, "measuring the PING round trip (%d samples)\n", n.ping);
  env.ping = ping(redis, n.ping);

  auto names = selected(o);
  progress bar(names.size());
  std::vector<combination_result> rows;
  std::size_t i = 0;
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    if (!matches(o.filter, L::combination_name())) return;
    bar.step(i++, L::combination_name() + ": uncontended cycle, " + std::to_string(n.cycles) + " samples");
    combination_result r;
    r.name = L::combination_name();
    r.ownership = L::ownership_type::policy_name;
    r.renewal = L::renewal_type::policy_name;
    r.wait = L::wait_type::policy_name;
    r.reproduces = reproduces(r.ownership, r.renewal);
    try {
      r.uncontended = uncontended<L>(redis, prefix + "uncontended:" + r.name, n.cycles);
    } catch (const std::system_error& e) {
      throw std::runtime_error(r.name + ": " + e.what());
    }
    rows.push_back(std::move(r));
  });
  auto deleted = delete_keys(redis, prefix);
  if (!private_server) std::fprintf(stderr, "deleted the run's %zu keys (%s*)\n", deleted, prefix.c_str());

  std::printf("%s", table(env, rows).c_str());
  std::filesystem::create_directories(o.out_dir);
  auto path = std::filesystem::path(o.out_dir) / "compare.json";
  std::ofstream(path) << json(env, rows);
  std::fprintf(stderr, "wrote %s\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  std::string why;
  auto o = parse_options(args, why);
  if (!o) {
    std::fprintf(stderr, "dlock-compare: %s (--help for usage)\n", why.c_str());
    return 2;
  }
  if (o->help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  if (o->list) {
    dlock::combinations::for_each([&](auto type) {
      using L = typename decltype(type)::type;
      if (matches(o->filter, L::combination_name()))
        std::printf("%s\t%s\n", L::combination_name().c_str(),
                    reproduces(L::ownership_type::policy_name, L::renewal_type::policy_name).c_str());
    });
    return 0;
  }
  if (selected(*o).empty()) {
    std::fprintf(stderr, "dlock-compare: no combination matches '%s' (--list shows them)\n", o->filter.c_str());
    return 2;
  }
  try {
    return run(*o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlock-compare: %s\n", e.what());
    return 1;
  }
}
