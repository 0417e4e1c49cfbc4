// The bytes a connection has read and the replies in them: a buffer in front
// of the incremental RESP parser.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <dlock/redis/resp.hpp>

namespace dlock::redis::detail {

class reply_stream {
 public:
  explicit reply_stream(parser_limits limits) : parser_(limits) {}

  // Bytes as they arrive. What was parsed is dropped here, once per read
  // and not once per reply: one read may hold thousands of small replies.
  void append(const char* data, std::size_t n) {
    buffer_.erase(0, parsed_);
    parsed_ = 0;
    buffer_.append(data, n);
  }

  // The next whole reply, if it has arrived; or the error that broke the
  // stream, which cannot be resynchronised (until reset()).
  parser::result next() {
    if (parsed_ >= buffer_.size()) return {};
    auto res = parser_.parse(std::string_view(buffer_).substr(parsed_));
    parsed_ += res.consumed;
    return res;
  }

  // Bytes that arrived and were not yet taken as replies.
  std::size_t buffered() const noexcept { return buffer_.size() - parsed_; }

  // For a new connection: no partial reply, no error, no bytes.
  void reset() noexcept {
    parser_.reset();
    buffer_.clear();
    parsed_ = 0;
  }

 private:
  parser parser_;
  std::string buffer_;
  std::size_t parsed_ = 0;  // bytes of buffer_ the parser has used
};

}  // namespace dlock::redis::detail
