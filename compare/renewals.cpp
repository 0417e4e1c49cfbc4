#include "renewals.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <thread>

#include <dlock/detail/renewal_service.hpp>
#include <dlock/dlock.hpp>

#include "contention.hpp"
#include "report.hpp"
#include "report_format.hpp"

namespace dlock::compare {

namespace {

using namespace format;

// What the server has done so far, from one INFO (cpu and commandstats).
struct server_work {
  long long script_calls = 0, pexpires = 0;
  double script_us = 0, cpu_us = 0;
};

// A field's number after `name` ("cmdstat_evalsha:calls=" ...) in INFO text, 0 when absent.
double field(const std::string& text, const std::string& name) {
  auto at = text.find(name);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + name.size()));
}

server_work work_of(RedisBackend& info) {
  auto text = info.command(redis::request().push("INFO", "cpu", "commandstats")).str;
  server_work w;
  for (const char* c : {"evalsha", "eval"}) {
    const std::string stat = std::string("cmdstat_") + c + ":";
    w.script_calls += static_cast<long long>(field(text, stat + "calls="));
    auto at = text.find(stat);
    if (at != std::string::npos) w.script_us += field(text.substr(at), ",usec=");
  }
  w.pexpires = static_cast<long long>(field(text, "cmdstat_pexpire:calls="));
  w.cpu_us = (info_number(text, "used_cpu_user") + info_number(text, "used_cpu_sys")) * 1e6;
  return w;
}

// Two renewal periods with `limit` holds per script call, after one period
// for the change to take effect; adds what they cost to `side`.
// `idle_cpu` (CPU us per second of an idle server: its timers) is taken
// off the CPU figures, leaving what the renewals cost it.
template <class S>
void measure(RedisBackend& info, S& renewals, std::size_t limit, std::chrono::milliseconds period, double idle_cpu,
             renewal_side& side, double& script_per_lock, double& cpu_per_lock) {
  renewals.batch_limit(limit);
  std::this_thread::sleep_for(period + std::chrono::milliseconds(100));
  auto before = work_of(info);
  auto t0 = std::chrono::steady_clock::now();
  auto renewed = renewals.renewals_sent(), calls = renewals.calls_sent();
  std::this_thread::sleep_for(2 * period);
  auto after = work_of(info);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  renewed = renewals.renewals_sent() - renewed, calls = renewals.calls_sent() - calls;
  const double script = after.script_us - before.script_us;
  const double cpu = std::max(0.0, after.cpu_us - before.cpu_us - idle_cpu * seconds);
  side.renewed += renewed;
  side.calls += calls;
  side.pexpires += after.pexpires - before.pexpires;
  side.script_us += script;
  side.cpu_us += cpu;
  script_per_lock = renewed ? script / static_cast<double>(renewed) : 0;
  cpu_per_lock = renewed ? cpu / static_cast<double>(renewed) : 0;
}

// The server's CPU us per second while nothing is sent to it but two INFOs.
double idle_cpu_per_s(RedisBackend& info, std::chrono::milliseconds d) {
  auto before = work_of(info);
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(d);
  auto after = work_of(info);
  return (after.cpu_us - before.cpu_us) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

renewal_row held_locks(RedisBackend& info, const std::string& url, const std::string& prefix, int n, int pairs,
                       std::chrono::milliseconds timeout, std::size_t limit) {
  renewal_row row;
  row.locks = n;
  row.idle_cpu_us_per_s = idle_cpu_per_s(info, std::chrono::seconds(1));
  RedisBackend backend(url);  // a renewal service of its own
  auto& renewals = backend.use_service<dlock::detail::renewal_service<RedisBackend>>();
  std::vector<std::unique_ptr<Lock<>>> locks;
  std::vector<Lock<>::hold_type> holds;
  locks.reserve(static_cast<std::size_t>(n));
  holds.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    locks.push_back(std::make_unique<Lock<>>(backend, prefix + "held:" + std::to_string(i), ownership::ReentrantHash{},
                                             renewal::Watchdog{timeout}));
    holds.push_back(locks.back()->acquire());
  }
  const auto period = timeout / 3;
  for (int p = 0; p < pairs; ++p) {
    double bs = 0, bc = 0, ss = 0, sc = 0;
    auto batched = [&] { measure(info, renewals, limit, period, row.idle_cpu_us_per_s, row.batched, bs, bc); };
    auto single = [&] { measure(info, renewals, 1, period, row.idle_cpu_us_per_s, row.single, ss, sc); };
    if (p % 2 == 0) batched(), single();
    else single(), batched();
    if (ss > 0) row.script_pairs.push_back(bs / ss);
    if (sc > 0) row.cpu_pairs.push_back(bc / sc);
  }
  renewals.batch_limit(limit);
  for (auto& h : holds) row.lost += h.lost() ? 1 : 0;
  holds.clear();  // released
  return row;
}

}  // namespace

renewals_result run_renewals(RedisBackend& info, const std::string& url, const std::string& prefix,
                             const std::vector<int>& held, int pairs) {
  renewals_result r;
  r.timeout = std::chrono::seconds(3);
  r.batch_limit = dlock::detail::renewal_service<RedisBackend>::default_batch_limit;
  for (int n : held) r.rows.push_back(held_locks(info, url, prefix, n, pairs, r.timeout, r.batch_limit));
  return r;
}

std::string renewals_table(const renewals_result& r) {
  if (r.rows.empty()) return {};
  std::string out = "\nheld locks (Lock<>, Watchdog " + fmt("%.0f", static_cast<double>(r.timeout.count()) / 1000) +
                    " s, renewed every " + fmt("%.0f", static_cast<double>(r.timeout.count()) / 3000) +
                    " s) on one backend: per renewed lock, the server's script time (INFO commandstats usec,\n"
                    "  the scripts' own commands included) and CPU (INFO cpu, its networking included, less its idle\n"
                    "  CPU measured before the locks were taken), renewing up to " +
                    std::to_string(r.batch_limit) +
                    " locks per script call\n  and one call per lock, in alternating windows of two periods "
                    "(batched/single: median of the pairs)\n";
  out += "  " + padded("locks", 7) + padded("calls/lock", 19) + padded("script us/lock", 22) +
         padded("cpu us/lock", 22) + padded("batched/single", 16) + "lost\n";
  out += "  " + padded("", 7) + padded("batched  single", 19) + padded("batched  single", 22) +
         padded("batched  single", 22) + padded("script   cpu", 16) + "\n";
  for (auto& row : r.rows)
    out += "  " + padded(std::to_string(row.locks), 7) + padded(fmt("%.3f", row.batched.calls_per_lock()), 9) +
           padded(fmt("%.2f", row.single.calls_per_lock()), 10) + padded(fmt("%.2f", row.batched.script_us_per_lock()), 9) +
           padded(fmt("%.2f", row.single.script_us_per_lock()), 13) + padded(fmt("%.2f", row.batched.cpu_us_per_lock()), 9) +
           padded(fmt("%.2f", row.single.cpu_us_per_lock()), 13) + padded(fmt("%.2f", median(row.script_pairs)), 9) +
           padded(fmt("%.2f", median(row.cpu_pairs)), 7) + std::to_string(row.lost) + "\n";
  return out;
}

std::string renewals_json(const renewals_result& r) {
  auto side = [](const renewal_side& s) {
    return "{\"renewed\": " + std::to_string(s.renewed) + ", \"calls\": " + std::to_string(s.calls) +
           ", \"pexpires\": " + std::to_string(s.pexpires) + ", \"calls_per_lock\": " + number(s.calls_per_lock()) +
           ", \"script_us_per_lock\": " + number(s.script_us_per_lock()) +
           ", \"cpu_us_per_lock\": " + number(s.cpu_us_per_lock()) + "}";
  };
  std::string out = "{\"timeout_ms\": " + std::to_string(r.timeout.count()) +
                    ", \"batch_limit\": " + std::to_string(r.batch_limit) + ", \"rows\": [";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    auto& row = r.rows[i];
    out += (i ? ",\n    " : "\n    ");
    out += "{\"locks\": " + std::to_string(row.locks) + ", \"batched\": " + side(row.batched) +
           ",\n     \"single\": " + side(row.single) + ", \"script_batched_vs_single\": " +
           number(median(row.script_pairs)) + ", \"script_pairs\": " + number_list(row.script_pairs) +
           ", \"cpu_batched_vs_single\": " + number(median(row.cpu_pairs)) + ", \"cpu_pairs\": " +
           number_list(row.cpu_pairs) + ", \"idle_cpu_us_per_s\": " + number(row.idle_cpu_us_per_s) +
           ", \"lost\": " + std::to_string(row.lost) + "}";
  }
  return out + "]}";
}

}  // namespace dlock::compare
