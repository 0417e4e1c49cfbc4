// Socket plumbing shared by fault_proxy and fake_redis (see loopback.hpp).
#include "loopback.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "redis_server.hpp"

namespace dlock::test::detail {

unique_fd& unique_fd::operator=(unique_fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int unique_fd::release() noexcept {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

unique_fd listen_on_loopback(std::uint16_t& port) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    // Close-on-exec, so redis-server processes forked later by the harness
    // never hold our sockets open.
    unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    int on = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    std::uint16_t candidate = free_port();
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(candidate);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno == EADDRINUSE) continue;
      throw std::runtime_error(std::string("bind: ") + std::strerror(errno));
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      if (errno == EADDRINUSE) continue;
      throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
    }
    port = candidate;
    return fd;
  }
  throw std::runtime_error("no free port to listen on 127.0.0.1");
}

void set_nodelay(int fd) noexcept {
  int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

wake_pipe::wake_pipe() {
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  read_.reset(fds[0]);
  write_.reset(fds[1]);
}

void wake_pipe::notify() noexcept {
  char byte = 1;
  // A full pipe already holds a pending wake-up, so EAGAIN is fine.
  while (::write(write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
}

void wake_pipe::drain() noexcept {
  char buf[64];
  while (::read(read_.get(), buf, sizeof buf) > 0) {
  }
}

}  // namespace dlock::test::detail
