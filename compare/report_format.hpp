// How dlock-compare's reports write numbers and text: printf-style figures,
// JSON strings and numbers, a latency and a contention run as JSON, padded
// table cells. Shared by report.cpp (the main table) and
// report_backends.cpp (the backends').
#pragma once

#include <cmath>
#include <map>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "report.hpp"

namespace dlock::compare::format {

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

inline std::string quoted(std::string_view s) {
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

/// Milliseconds for a sentence: "812 ms", "1,520 ms".
inline std::string fmt_ms(double ms) {
  char buf[48];
  const long long whole = static_cast<long long>(ms + 0.5);
  if (whole >= 1000) std::snprintf(buf, sizeof buf, "%lld,%03lld ms", whole / 1000, whole % 1000);
  else std::snprintf(buf, sizeof buf, "%lld ms", whole);
  return buf;
}

/// Timelines as a JSON list, one per line.
inline std::string timelines_json(const std::vector<timeline>& ts) {
  std::string out = "[";
  for (std::size_t k = 0; k < ts.size(); ++k) out += (k ? ",\n      " : "\n      ") + ts[k].json();
  return out + "]";
}

inline std::string number(double v) { return std::isfinite(v) ? fmt("%.3f", v) : "null"; }

/// A JSON array of numbers.
inline std::string number_list(const std::vector<double>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + number(v[i]);
  return out + "]";
}

inline std::string latency_json(const latency& l, double ping_us) {
  std::string out = "{\"p50_us\": " + number(l.p50_us) + ", \"p99_us\": " + number(l.p99_us);
  if (ping_us > 0)
    out += ", \"p50_ping\": " + number(l.p50_us / ping_us) + ", \"p99_ping\": " + number(l.p99_us / ping_us);
  return out + ", \"samples\": " + std::to_string(l.samples) + "}";
}

inline std::string padded(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}


// {"get": 1.0, ...}: names are INFO's ("client|setname"), plain ASCII.
inline std::string by_name_json(const std::map<std::string, double>& m) {
  std::string out = "{";
  for (auto& [name, n] : m) out += (out.size() > 1 ? ", \"" : "\"") + name + "\": " + number(n);
  return out + "}";
}

inline std::string contention_json(const contention_result& c, double ping_us) {
  return "{\"workers\": " + std::to_string(c.workers) + ", \"seconds\": " + number(c.seconds) +
         ", \"cycles\": " + std::to_string(c.cycles) + ", \"cycles_per_s\": " + number(c.cycles_per_s) +
         ", \"handoffs_per_s\": " + number(c.handoffs_per_s) +
         ", \"handoff\": " + latency_json(c.handoff, ping_us) + ", \"most\": " + std::to_string(c.most) +
         ", \"fewest\": " + std::to_string(c.fewest) +
         ", \"commands_per_acquisition\": " + number(c.commands_per_acquisition) +
         ", \"commands_by_name\": " + by_name_json(c.commands_by_name) +
         ", \"server_cpu_us_per_acquisition\": " + number(c.server_cpu_us_per_acquisition) +
         ", \"overlaps\": " + std::to_string(c.overlaps) + ", \"lost_updates\": " + std::to_string(c.lost_updates) +
         ", \"errors\": " + std::to_string(c.errors) +
         (c.strip ? ",\n         \"strip\": " + c.strip->json() : std::string()) + "}";
}

}  // namespace dlock::compare::format
