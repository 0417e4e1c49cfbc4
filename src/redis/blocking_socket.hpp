// The blocking connection's socket: timeouts to a deadline, in whole
// milliseconds, and the BIO its TLS sessions read and write through
// (blocking_tls.cpp).
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>

#include <openssl/ssl.h>

#include <dlock/redis/detail/receive_deadline.hpp>

namespace dlock::redis::detail {

// What is left until `deadline`, at least 1 ms (a socket timeout of 0 means
// "none").
inline std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now()));
}

// SO_RCVTIMEO or SO_SNDTIMEO (`option`) of `fd`.
inline bool set_timeout(int fd, int option, std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv) == 0;
}

// A BIO for a TLS session on the blocking socket `fd`: send() with
// MSG_NOSIGNAL and recv(). Each send waits no longer than `deadline` until
// lift_connect_deadline; each receive, no longer than `receive`'s deadline
// (`receive` is the connection's, and outlives the BIO). Null when OpenSSL
// cannot make one.
BIO* new_socket_bio(int fd, std::chrono::steady_clock::time_point deadline, receive_deadline* receive);

// The session's sends wait the socket's send timeout alone from now on
// (connected).
void lift_connect_deadline(SSL* ssl);

}  // namespace dlock::redis::detail
