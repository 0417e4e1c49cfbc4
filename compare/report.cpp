#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace dlock::compare {

latency percentiles(std::vector<double>& s) {
  latency l;
  l.samples = s.size();
  if (s.empty()) return l;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) {
    auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(s.size()))) - 1;
    return s[std::min(i, s.size() - 1)];
  };
  l.p50_us = at(0.50);
  l.p99_us = at(0.99);
  return l;
}

namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt("\\u%04x", static_cast<unsigned char>(c));
        else out += c;
    }
  }
  return out + "\"";
}

std::string number(double v) { return std::isfinite(v) ? fmt("%.3f", v) : "null"; }

std::string latency_json(const latency& l, double ping_us) {
  std::string out = "{\"p50_us\": " + number(l.p50_us) + ", \"p99_us\": " + number(l.p99_us);
  if (ping_us > 0)
    out += ", \"p50_ping\": " + number(l.p50_us / ping_us) + ", \"p99_ping\": " + number(l.p99_us / ping_us);
  return out + ", \"samples\": " + std::to_string(l.samples) + "}";
}

std::string padded(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

std::string table(const environment& env, const std::vector<combination_result>& rows) {
  const double ping = env.ping.p50_us;
  std::string out = "PING round trip (p50): " + fmt("%.1f", ping) + " us on Redis " + env.redis_version + " (" +
                    env.redis_target + "), " + std::to_string(env.cpu_count) + " CPUs\n\n";
  std::size_t name_w = 11, rep_w = 10;
  for (auto& r : rows) {
    name_w = std::max(name_w, r.name.size());
    rep_w = std::max(rep_w, r.reproduces.size());
  }
  out += padded("combination", name_w) + "  " + padded("reproduces", rep_w) +
         "  uncontended cycle: p50 us  p50/PING  p99/PING\n";
  for (auto& r : rows) {
    out += padded(r.name, name_w) + "  " + padded(r.reproduces, rep_w) + "  " +
           padded(fmt("%25.1f", r.uncontended.p50_us), 25) + fmt("  %8.2f", r.uncontended.p50_us / ping) +
           fmt("  %8.2f", r.uncontended.p99_us / ping) + "\n";
  }
  return out;
}

std::string json(const environment& env, const std::vector<combination_result>& rows) {
  const double ping = env.ping.p50_us;
  std::string out = "{\n  \"environment\": {\n";
  out += "    \"redis_version\": " + quoted(env.redis_version) + ",\n";
  out += "    \"redis\": " + quoted(env.redis_target) + ",\n";
  out += "    \"ping\": " + latency_json(env.ping, 0) + ",\n";
  out += "    \"cpu_count\": " + std::to_string(env.cpu_count) + ",\n";
  out += "    \"compiler\": " + quoted(env.compiler) + ",\n";
  out += "    \"dlock_version\": " + quoted(env.dlock_version) + ",\n";
  out += "    \"git_commit\": " + quoted(env.git_commit) + ",\n";
  out += "    \"depth\": " + quoted(env.depth) + "\n  },\n  \"combinations\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    out += i ? ",\n" : "\n";
    out += "    {\"name\": " + quoted(r.name) + ", \"ownership\": " + quoted(r.ownership) +
           ", \"renewal\": " + quoted(r.renewal) + ", \"wait\": " + quoted(r.wait) +
           ", \"reproduces\": " + quoted(r.reproduces) + ",\n     \"uncontended\": " +
           latency_json(r.uncontended, ping) + "}";
  }
  out += "\n  ]\n}\n";
  return out;
}

}  // namespace dlock::compare
