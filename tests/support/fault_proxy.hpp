// fault_proxy: a TCP proxy on 127.0.0.1 in front of a Redis server that can
// stall, delay, cut or refuse connections, for fault-injection tests of a
// client. Plain POSIX and the standard library only, like the rest of the
// harness.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dlock::test {

/// Forwards 127.0.0.1:port() to 127.0.0.1:<target port> from a background
/// thread. Every member may be called from any thread while it runs; the
/// destructor stops the thread and closes every socket.
class fault_proxy {
 public:
  /// Which way bytes travel: to_server is client -> target.
  enum class direction { both, to_server, to_client };

  /// Starts listening on a free port and forwarding to `target_port`.
  explicit fault_proxy(std::uint16_t target_port);
  /// Stops the thread and closes the listener and every connection.
  ~fault_proxy();
  fault_proxy(const fault_proxy&) = delete;
  fault_proxy& operator=(const fault_proxy&) = delete;

  /// The port clients connect to.
  std::uint16_t port() const;
  /// "redis://127.0.0.1:<port>".
  std::string url() const;

  /// Stops forwarding in `d` (on top of any direction already stalled):
  /// bytes already read are held, and that side is no longer read, so later
  /// ones wait in the kernel's buffers. Connections stay open; nothing is
  /// lost.
  void stall(direction d = direction::both);
  /// Forwards again in both directions, queued bytes first, in order.
  void resume();
  /// Every chunk read from now on in `dir` is forwarded `d` after it was
  /// read, order kept (an EOF too); zero turns the delay off. At most 1 MiB
  /// waits per direction (then the sender is pushed back), so a delayed
  /// direction also carries at most 1 MiB per `d`.
  void delay(std::chrono::milliseconds d, direction dir = direction::both);
  /// Every chunk read from now on in `dir` waits a further random time,
  /// uniform in [0, spread], after the delay (latency jitter); order is
  /// kept, so a chunk never leaves before the one read ahead of it. Zero
  /// turns it off.
  void jitter(std::chrono::milliseconds spread, direction dir = direction::both);
  /// Every chunk read from now on in `dir` is forwarded a byte at a time,
  /// one byte every `every` (after the delay, if any): a peer that trickles
  /// its bytes. Zero turns it off.
  void trickle(std::chrono::milliseconds every, direction dir = direction::both);
  /// Resets every proxied connection on both sides (the client sees
  /// ECONNRESET or EOF); returns once they are closed. Later connections are
  /// forwarded as usual.
  void cut();
  /// While on, new connections are accepted and closed at once (EOF).
  void refuse(bool on);

  /// Proxied connection pairs open now.
  std::size_t connections() const;
  /// Connections accepted since construction, refused ones included.
  std::size_t accepted() const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace dlock::test
