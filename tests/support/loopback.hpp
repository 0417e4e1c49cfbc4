// Socket plumbing shared by fault_proxy and fake_redis: an owning file
// descriptor, a listening socket on a free 127.0.0.1 port, the self-pipe
// that wakes a poll() loop when another thread changes its settings, and
// the listener-and-thread life both are built on.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace dlock::test::detail {

/// Owns one file descriptor and closes it on destruction.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}
  unique_fd& operator=(unique_fd&& other) noexcept;
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept;
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// A non-blocking, close-on-exec socket listening on 127.0.0.1 at a port
/// from free_port(); `port` receives it. Retries when another process takes
/// the port between free_port()'s check and our bind.
unique_fd listen_on_loopback(std::uint16_t& port);

/// Sets TCP_NODELAY, so a proxy or fake server adds no Nagle delay of its
/// own to the small request/reply exchanges of Redis.
void set_nodelay(int fd) noexcept;

/// The self-pipe of a poll() loop: other threads notify(), the loop polls
/// fd() for POLLIN and drain()s it before looking at what changed.
class wake_pipe {
 public:
  wake_pipe();
  int fd() const noexcept { return read_.get(); }
  void notify() noexcept;
  void drain() noexcept;

 private:
  unique_fd read_, write_;
};

/// A listener on a free loopback port, served by a poll() loop on a thread
/// of its own: the part of fake_redis's and fault_proxy's state that starts
/// and stops the same way. The loop polls `wake` and `listener`, and ends
/// once it sees `stopping` (set under `m` by stop()).
struct loopback_service {
  std::uint16_t port = 0;
  unique_fd listener;
  wake_pipe wake;
  mutable std::mutex m;
  bool stopping = false;  // guarded by `m`
  std::thread thread;

  /// Listens, then runs `loop` on the service's thread.
  template <class Loop>
  void start(Loop loop) {
    listener = listen_on_loopback(port);
    thread = std::thread(std::move(loop));
  }
  /// Asks the loop to end and waits for it; the members close the rest.
  void stop() {
    {
      std::lock_guard g(m);
      stopping = true;
    }
    wake.notify();
    thread.join();
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port); }
};

}  // namespace dlock::test::detail
