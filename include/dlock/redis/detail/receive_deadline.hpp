// The receive timeout of a blocking socket, kept within the deadline of the
// read under way (redis::blocking_connection's plain reads and its TLS
// sessions' BIO share one).
#pragma once

#include <chrono>

namespace dlock::redis::detail {

// A socket's SO_RCVTIMEO bounds one receive, not a read: a reply that
// arrives a byte at a time would let each receive wait the whole timeout.
// So before each receive the timeout is brought within what is left of the
// deadline. One OpenSSL read can take several receives (a record in
// pieces), which is why the TLS BIO asks the same question before each.
struct receive_deadline {
  using clock = std::chrono::steady_clock;

  clock::time_point deadline = clock::time_point::max();  // of the read under way; max: none
  std::chrono::milliseconds set = std::chrono::milliseconds::max();  // SO_RCVTIMEO as last set; max: none
  bool cut_short = false;  // the last receive ended by the timeout

  // Before a receive on `fd`: false, errno EAGAIN, once the deadline has
  // passed (false with setsockopt's errno when that fails); else the
  // socket's timeout is at most what is left. It is lowered when less is
  // left, and raised only after it cut a wait short, so that a command
  // whose reply comes in one piece costs no setsockopt.
  bool fit(int fd);
  // After it, with the receive's result (errno as the receive left it).
  void received(long n) noexcept;
  // A new socket, which has no timeout.
  void reset() noexcept { *this = receive_deadline{}; }
};

}  // namespace dlock::redis::detail
