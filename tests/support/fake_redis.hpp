// fake_redis: a tiny RESP2 server on 127.0.0.1 whose replies a test scripts
// per command, to make a "server" answer with the wrong type, an error or
// nothing a real Redis would say. Plain POSIX and the standard library only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::test {

/// Answers each command (a RESP array of bulk strings, pipelined or not,
/// from any number of connections) with the raw bytes the responder returns,
/// from a background thread. Every member may be called from any thread
/// while it runs; the destructor stops the thread and closes every socket.
/// A request that is not an array of bulk strings, or has absurd lengths,
/// gets "-ERR Protocol error" and its connection is closed.
class fake_redis {
 public:
  /// Returns the raw RESP reply to `command` (":1\r\n", "+OK\r\n",
  /// "$-1\r\n", or several replies, or "" for none), or nullopt for the
  /// default reply. Called on the server's thread, one command at a time,
  /// without any lock held; an exception becomes an -ERR reply.
  using responder = std::function<std::optional<std::string>(const std::vector<std::string>& command)>;

  /// Starts listening on a free port. Without a responder every command
  /// gets its default reply: PING -> +PONG (or its argument); CLIENT, SELECT
  /// and AUTH -> +OK; SCRIPT LOAD -> the script's SHA-1 as a bulk string;
  /// anything else -> "-ERR fake_redis: no reply scripted for <NAME>".
  explicit fake_redis(responder r = {});
  /// Stops the thread and closes the listener and every connection.
  ~fake_redis();
  fake_redis(const fake_redis&) = delete;
  fake_redis& operator=(const fake_redis&) = delete;

  /// The port clients connect to.
  std::uint16_t port() const;
  /// "redis://127.0.0.1:<port>".
  std::string url() const;

  /// Replaces the responder; commands parsed from then on use the new one.
  void set_responder(responder r);

  /// Every command received so far, in arrival order, across connections.
  std::vector<std::vector<std::string>> commands() const;
  /// How many received commands have `name` as first word (any case).
  std::size_t count(std::string_view name) const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace dlock::test
