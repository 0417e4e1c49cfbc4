// A request: one or more commands encoded back to back, sent in one write,
// answered by one reply each.
#pragma once

#include <charconv>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/redis/resp.hpp>

namespace dlock::redis {

/// The replies to a request, one per command, in order. Error replies are
/// values of kind::error here; only transport failures are error codes.
using response = std::vector<value>;

/// Commands to send in one write, RESP-encoded as they are pushed; see
/// connection::async_exec. A request of N commands is answered by N replies.
class request {
 public:
  /// Appends one command. Arguments may be strings, string views or integers;
  /// each becomes one bulk string, so binary data is safe.
  template <class... Args>
  request& push(std::string_view command, const Args&... args) {
    std::string numbers[sizeof...(Args) + 1];
    std::string_view parts[sizeof...(Args) + 1];
    parts[0] = command;
    std::size_t i = 1;
    ((parts[i] = as_view(args, numbers[i]), ++i), ...);
    encode_command(payload_, std::span<const std::string_view>(parts, i));
    ++commands_;
    return *this;
  }

  /// Appends one command given as a whole argument vector (command first).
  request& push_args(std::span<const std::string_view> args) {
    encode_command(payload_, args);
    ++commands_;
    return *this;
  }

  /// Appends every command of `other`, in order.
  request& append(const request& other) {
    payload_ += other.payload_;
    commands_ += other.commands_;
    return *this;
  }

  /// The number of commands, and so of replies expected.
  std::size_t size() const noexcept { return commands_; }
  bool empty() const noexcept { return commands_ == 0; }  ///< no command pushed yet
  /// The commands' encoding, back to back: the bytes written to the socket.
  const std::string& payload() const noexcept { return payload_; }

 private:
  static std::string_view as_view(std::string_view s, std::string&) { return s; }
  static std::string_view as_view(const std::string& s, std::string&) { return s; }
  static std::string_view as_view(const char* s, std::string&) { return s; }
  template <std::integral T>
  static std::string_view as_view(T v, std::string& storage) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    storage.assign(buf, end);
    return storage;
  }

  std::string payload_;
  std::size_t commands_ = 0;
};

}  // namespace dlock::redis
