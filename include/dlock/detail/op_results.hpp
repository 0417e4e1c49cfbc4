// What Lock's acquire and release operations end with.
#pragma once

#include <memory>
#include <string>

#include <dlock/detail/hold_record.hpp>
#include <dlock/redis/error_code.hpp>

namespace dlock::detail {

/// An acquire's end: its error (none: won) and its record; with
/// server_error, the server's own words (an ACL refusal, a script's error)
/// for the message.
struct acquire_result {
  redis::error_code ec;
  std::shared_ptr<hold_record> rec;
  std::string server_reply;
};

/// A release's end: its error, and when it may be retried, the release id
/// to retry with; the server's words as above.
struct release_result {
  redis::error_code ec;
  std::string retry_id;
  std::string server_reply;
};

}  // namespace dlock::detail
