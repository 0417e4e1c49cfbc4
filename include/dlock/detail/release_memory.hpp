// Release memory: how a release script remembers its own result for a
// short while, shared by the ownerships whose release may be retried.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/concepts.hpp>
#include <dlock/detail/key_slot.hpp>

namespace dlock::detail {

/// How a release script remembers its own result for a short while, so that
/// a release retried after outcome_unknown is answered from memory instead
/// of acting twice (a reentrant count must never drop by two). The marker
/// key shares the lock's cluster slot.
struct release_memory {
  milliseconds window{10000};

  std::error_code validate() const { return validate_positive(window, error::invalid_interval); }
  static std::string key(const hold_record& rec) { return same_slot_key(rec.name, "release:" + rec.release_id); }
  /// The marker an acquire try leaves when it wins (ReentrantHash).
  static std::string acquire_key(const hold_record& rec) {
    return same_slot_key(rec.name, "acquire:" + rec.attempt_id);
  }
  std::string ttl() const { return std::to_string(window.count()); }

  /// "1" for a retried release, "0" for a first attempt: the release
  /// script's retry argument.
  static const char* retry_flag(const hold_record& rec) { return rec.release_retry ? "1" : "0"; }

  /// A release script with this memory: a retry (ARGV[retry_arg] is "1") is
  /// answered from the marker at KEYS[marker_key] when there is one; else
  /// it runs `body` (which sets the local `result`, a number, and may return
  /// an error before writing anything) and keeps `result` there for
  /// ARGV[ttl_arg] ms. A first attempt skips the lookup: release ids are
  /// unique, so only a retry can find a marker. The indices are the
  /// script's own constants; keys and values still reach it only as KEYS
  /// and ARGV.
  static std::string remembered(std::string_view body, int marker_key, int ttl_arg, int retry_arg) {
    auto marker = "KEYS[" + std::to_string(marker_key) + "]";
    std::string lua = "if ARGV[" + std::to_string(retry_arg) + "] == '1' then\n"
                      "  local prior = redis.call('GET', " + marker + ")\n"
                      "  if prior then return tonumber(prior) end\n"
                      "end\n"
                      "local result\n";
    lua.append(body);
    lua += "redis.call('SET', " + marker + ", result, 'PX', ARGV[" + std::to_string(ttl_arg) + "])\n"
           "return result\n";
    return lua;
  }
};

}  // namespace dlock::detail
