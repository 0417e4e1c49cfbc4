// The BIO of the blocking connection's TLS sessions.
#include "blocking_socket.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <new>

#include <openssl/bio.h>

namespace dlock::redis::detail {
namespace {

using clock = std::chrono::steady_clock;

// The TLS session's socket I/O: send() with MSG_NOSIGNAL, where OpenSSL's
// own socket BIO calls write(), which raises SIGPIPE on a closed connection
// (and a library must not change how its process handles signals). A
// timeout (EAGAIN) is a retry, which SSL_get_error reports as
// SSL_ERROR_WANT_READ or _WANT_WRITE.
//
// Each receive waits no longer than the read's deadline, and while
// connecting each send no longer than the connect deadline: one OpenSSL
// call reads or writes a record in as many receives or sends as it takes,
// and a server that trickles bytes could otherwise keep it past any one
// socket timeout.
struct bio_io {
  int fd = -1;
  clock::time_point deadline = clock::time_point::max();  // of the sends; max: none
  receive_deadline* receive = nullptr;
};

bio_io& io_of(BIO* b) { return *static_cast<bio_io*>(::BIO_get_data(b)); }

// False (errno EAGAIN) once the connect deadline has passed; else the
// socket's send timeout is at most what is left.
bool send_within_deadline(const bio_io& io) {
  if (io.deadline == clock::time_point::max()) return true;
  auto now = clock::now();
  if (now >= io.deadline || !set_timeout(io.fd, SO_SNDTIMEO, left_until(io.deadline))) {
    errno = EAGAIN;
    return false;
  }
  return true;
}

int bio_write(BIO* b, const char* data, int size) {
  ::BIO_clear_retry_flags(b);
  const auto& io = io_of(b);
  ssize_t n = -1;
  if (send_within_deadline(io)) do n = ::send(io.fd, data, static_cast<std::size_t>(size), MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ::BIO_set_retry_write(b);
  return static_cast<int>(n);
}

int bio_read(BIO* b, char* into, int size) {
  ::BIO_clear_retry_flags(b);
  const auto& io = io_of(b);
  ssize_t n = -1;
  if (io.receive->fit(io.fd)) {
    do n = ::recv(io.fd, into, static_cast<std::size_t>(size), 0);
    while (n < 0 && errno == EINTR);
    io.receive->received(n);
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ::BIO_set_retry_read(b);
  return static_cast<int>(n);
}

long bio_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int bio_create(BIO* b) {
  ::BIO_set_data(b, new (std::nothrow) bio_io);
  ::BIO_set_init(b, ::BIO_get_data(b) != nullptr);
  return ::BIO_get_data(b) != nullptr;
}

int bio_destroy(BIO* b) {
  delete static_cast<bio_io*>(::BIO_get_data(b));
  ::BIO_set_data(b, nullptr);
  return 1;
}

// Made once, kept for the process's life (OpenSSL keeps no reference of
// its own); null when OpenSSL could not make it.
const BIO_METHOD* socket_bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = ::BIO_meth_new(::BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock blocking socket");
    if (m && ::BIO_meth_set_write(m, bio_write) == 1 && ::BIO_meth_set_read(m, bio_read) == 1 &&
        ::BIO_meth_set_ctrl(m, bio_ctrl) == 1 && ::BIO_meth_set_create(m, bio_create) == 1 &&
        ::BIO_meth_set_destroy(m, bio_destroy) == 1)
      return m;
    if (m) ::BIO_meth_free(m);
    return static_cast<BIO_METHOD*>(nullptr);
  }();
  return method;
}

}  // namespace

BIO* new_socket_bio(int fd, clock::time_point deadline, receive_deadline* receive) {
  const BIO_METHOD* method = socket_bio_method();
  BIO* bio = method ? ::BIO_new(method) : nullptr;
  if (bio) io_of(bio) = bio_io{fd, deadline, receive};
  return bio;
}

void lift_connect_deadline(SSL* ssl) { io_of(::SSL_get_rbio(ssl)).deadline = clock::time_point::max(); }

}  // namespace dlock::redis::detail
