// blocking_connection: one socket in blocking mode, with SO_RCVTIMEO and
// SO_SNDTIMEO for the command timeout, so that a command costs one send()
// and (usually) one recv(), the least a client can spend.
#include <dlock/redis/blocking_connection.hpp>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <optional>

#include <boost/asio/ssl/context.hpp>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <dlock/redis/address_source.hpp>
#include <dlock/redis/script.hpp>

#include "address_lookup.hpp"
#include "connect_error.hpp"
#include "handshake.hpp"
#include "blocking_socket.hpp"
#include "tls.hpp"

namespace dlock::redis {
namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

error_code os_error(int e) { return error_code(e, boost::system::system_category()); }

using detail::left_until;
using detail::set_timeout;

}  // namespace

namespace detail {

bool receive_deadline::fit(int fd) {
  if (deadline == clock::time_point::max()) return true;
  auto now = clock::now();
  if (now >= deadline) {
    errno = EAGAIN;
    return false;
  }
  auto budget = std::chrono::ceil<milliseconds>(deadline - now);
  if (budget < set || (cut_short && budget > set)) {
    if (!set_timeout(fd, SO_RCVTIMEO, budget)) return false;
    set = budget;
  }
  return true;
}

void receive_deadline::received(long n) noexcept { cut_short = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK); }

}  // namespace detail

namespace {

// Connects `fd` to `addr` within `deadline`, then leaves it in blocking mode.
error_code connect_within(int fd, const sockaddr* addr, socklen_t len, clock::time_point deadline) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return os_error(errno);
  if (::connect(fd, addr, len) != 0) {
    if (errno != EINPROGRESS) return os_error(errno);
    for (;;) {
      pollfd p{fd, POLLOUT, 0};
      int n = ::poll(&p, 1, static_cast<int>(left_until(deadline).count()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return os_error(errno);
      if (n == 0) return error::connect_timeout;
      break;
    }
    int err = 0;
    socklen_t err_len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) return os_error(errno);
    if (err != 0) return os_error(err);
  }
  if (::fcntl(fd, F_SETFL, flags) < 0) return os_error(errno);
  return {};
}

}  // namespace

blocking_connection::blocking_connection(config cfg)
    : cfg_(std::move(cfg)),
      tls_context_([this] {
        // The context, kept alive with the process-wide client it belongs to.
        auto client = detail::tls_client_for(cfg_);
        return client ? std::shared_ptr<boost::asio::ssl::context>(client, client->context.get()) : nullptr;
      }()),
      parser_(cfg_.limits) {}

blocking_connection::~blocking_connection() { close(); }

void blocking_connection::close() noexcept {
  // No close_notify: the socket closes whatever the session's state, and
  // the server reads the end of the stream as the client gone.
  if (ssl_) ::SSL_free(ssl_);
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  owed_ = 0;
  receive_.reset();  // a new socket has no timeout
  parser_.reset();
  buffer_.clear();
}

bool blocking_connection::check_idle() {
  if (fd_ < 0) return false;
  if (ssl_ && ::SSL_pending(ssl_) > 0 && owed_ == 0) {
    close();  // decrypted bytes nobody asked for
    return false;
  }
  char c;
  ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n > 0 && owed_ > 0) return true;  // late replies, read by the next command
  close();  // end of file, a reset, or bytes nobody asked for
  return false;
}

error_code blocking_connection::open() {
  auto now = clock::now();
  if (now < retry_after_) return error::not_connected;
  // With an address source, where it found the server last; the shared
  // connection finds it (a blocking call cannot wait for that).
  std::optional<address> target = address::of(cfg_);
  if (cfg_.source) {
    generation_ = cfg_.source->generation();
    target = cfg_.source->last_found();
    if (!target) return error::not_connected;
  }
  auto deadline = now + cfg_.connect_timeout;
  last_failure_.clear();
  error_code ec = open_socket(*target, deadline);
  if (!ec && tls_context_) ec = start_tls(*target, deadline);
  if (!ec) ec = handshake(deadline);
  if (ec) {
    close();
    next_wait_ = next_wait_.count() == 0 ? cfg_.reconnect_wait : std::min(next_wait_ * 2, cfg_.reconnect_wait_max);
    retry_after_ = clock::now() + next_wait_;
    return detail::to_connect_error(ec);
  }
  next_wait_ = milliseconds(0);
  retry_after_ = {};
  last_used_ = clock::now();
  ++connects_;
  scripts_.clear();  // it may be a restarted server
  return {};
}

error_code blocking_connection::open_socket(const address& target, clock::time_point deadline) {
  close();
  if (target.kind == config::transport::unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (target.path.size() >= sizeof addr.sun_path) return error::connection_refused;
    std::memcpy(addr.sun_path, target.path.data(), target.path.size());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return os_error(errno);
    return connect_within(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr, deadline);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port = std::to_string(target.port);
  if (int rc = ::getaddrinfo(target.host.c_str(), port.c_str(), &hints, &found); rc != 0 || !found)
    return error::resolve_failed;
  error_code ec = error::resolve_failed;
  for (addrinfo* a = found; a; a = a->ai_next) {
    close();
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) {
      ec = os_error(errno);
      continue;
    }
    ec = connect_within(fd_, a->ai_addr, a->ai_addrlen, deadline);
    if (!ec || ec == error::connect_timeout) break;
  }
  ::freeaddrinfo(found);
  if (ec) return ec;
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {};
}

error_code blocking_connection::handshake(clock::time_point deadline) {
  const detail::handshake greeting(cfg_);
  if (!set_timeout(fd_, SO_SNDTIMEO, left_until(deadline))) return os_error(errno);
  // Under TLS 1.3 a refused client certificate is only heard in this first
  // exchange: the server's alert on the first read, or (its alert lost
  // with the close) the connection ended.
  const bool tls13 = ssl_ && ::SSL_version(ssl_) == TLS1_3_VERSION;
  tls_error_ = 0;
  response replies;
  // (A failed write or read has closed the session: what it knew is kept here.)
  auto refused_certificate = [&](error_code ec) {
    if (tls_error_ != 0) {
      auto failure = detail::read_tls_failure(nullptr, tls_error_);
      last_failure_ = std::move(failure.why);
      return failure.code;
    }
    // The connection ended (not a timeout) before a reply, after the
    // server asked for a certificate: see refused_certificate_likely.
    if (tls13 && certificate_requested_ && replies.empty() && clock::now() < deadline &&
        (ec == error::not_connected || ec == error::outcome_unknown)) {
      auto failure = detail::refused_after_request(!cfg_.tls->cert_file.empty());
      last_failure_ = std::move(failure.why);
      return failure.code;
    }
    return ec;
  };
  bool wrote_any = false;
  if (auto ec = write_all(greeting.commands().payload(), wrote_any)) return refused_certificate(ec);
  if (auto ec = read_replies(greeting.replies_expected(), replies, deadline)) {
    ec = refused_certificate(ec);
    return ec == error::outcome_unknown && clock::now() >= deadline ? error_code(error::connect_timeout) : ec;
  }
  if (auto ec = greeting.verdict(replies)) return ec;
  if (ssl_) detail::lift_connect_deadline(ssl_);  // connected
  // From now on every send and every first read waits the command timeout.
  if (!set_timeout(fd_, SO_SNDTIMEO, cfg_.command_timeout) || !set_timeout(fd_, SO_RCVTIMEO, cfg_.command_timeout))
    return os_error(errno);
  receive_.set = cfg_.command_timeout;
  return {};
}

error_code blocking_connection::start_tls(const address& target, clock::time_point deadline) {
  ::ERR_clear_error();
  ssl_ = ::SSL_new(tls_context_->native_handle());
  // The sends' deadline holds until connected; the receives' is receive_'s,
  // the connect deadline until the handshake's first read sets its own.
  receive_.deadline = deadline;
  BIO* bio = ssl_ ? detail::new_socket_bio(fd_, deadline, &receive_) : nullptr;
  if (!bio) {
    last_failure_ = "OpenSSL could not make a TLS session";
    return error::tls_handshake_failed;
  }
  ::SSL_set_bio(ssl_, bio, bio);
  // SSL_write returns after each whole record, so a failed write knows
  // whether a record the server can read has left (see write_all).
  ::SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE);
  detail::watch_certificate_request(ssl_, &certificate_requested_);
  if (!detail::prepare_tls_session(ssl_, *cfg_.tls, target.host)) {
    last_failure_ = "OpenSSL refused the server name";
    return error::tls_handshake_failed;
  }
  for (;;) {  // the BIO keeps each send and receive within the deadline
    ::ERR_clear_error();
    int rc = ::SSL_connect(ssl_);
    if (rc == 1) return {};
    int e = ::SSL_get_error(ssl_, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (clock::now() >= deadline) return error::connect_timeout;
      continue;
    }
    auto failure = detail::read_tls_failure(ssl_, e == SSL_ERROR_SSL ? ::ERR_get_error() : 0);
    ::ERR_clear_error();
    last_failure_ = std::move(failure.why);
    return failure.code;
  }
}

long blocking_connection::send_some(const char* data, std::size_t size) {
  if (!ssl_) return ::send(fd_, data, size, MSG_NOSIGNAL);
  ::ERR_clear_error();
  std::size_t written = 0;
  if (::SSL_write_ex(ssl_, data, size, &written) == 1) return static_cast<long>(written);
  int e = ::SSL_get_error(ssl_, 0);
  ::ERR_clear_error();
  errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

long blocking_connection::receive_some(char* into, std::size_t size) {
  if (!ssl_) {
    if (!receive_.fit(fd_)) return -1;
    ssize_t n = ::recv(fd_, into, size, 0);
    receive_.received(n);
    return n;
  }
  ::ERR_clear_error();  // the BIO fits each of the session's receives
  std::size_t got = 0;
  if (::SSL_read_ex(ssl_, into, size, &got) == 1) return static_cast<long>(got);
  int e = ::SSL_get_error(ssl_, 0);
  tls_error_ = e == SSL_ERROR_SSL ? ::ERR_get_error() : 0;
  ::ERR_clear_error();
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_ZERO_RETURN) return 0;  // the server's close_notify: end of stream
  errno = ECONNRESET;  // a broken record, an alert, a reset: the stream is over
  return -1;
}

error_code blocking_connection::write_all(const std::string& data, bool& wrote_any) {
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send_some(data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close();
      // Not one byte left: the command did not reach the server.
      if (!wrote_any) return errno == EAGAIN || errno == EWOULDBLOCK ? error::command_timeout : error::not_connected;
      return error::outcome_unknown;
    }
    wrote_any = true;
    off += static_cast<std::size_t>(n);
  }
  return {};
}

error_code blocking_connection::read_replies(std::size_t n, response& out, clock::time_point deadline) {
  char chunk[16 * 1024];
  bool heard = false;
  receive_.deadline = deadline;
  const bool owed_before = owed_ > 0;
  while (out.size() < n) {
    if (!buffer_.empty()) {
      auto res = parser_.parse(buffer_);
      buffer_.erase(0, res.consumed);
      if (res.ec) {
        close();  // a broken stream cannot be resynchronised
        return error::outcome_unknown;
      }
      if (res.reply) {
        if (owed_ > 0) --owed_;  // the late reply of a command that timed out
        else out.push_back(std::move(*res.reply));
        continue;
      }
    }
    auto now = clock::now();
    if (now >= deadline) {
      if (owed_before && !heard) {
        close();  // two commands and not a byte: the server is gone
      } else {
        // A slow server: the socket stays open, and the next command on it
        // is read after these replies, so whatever it asks (say, whether
        // this command won) is answered after this command ran, if it runs.
        owed_ += n - out.size();
      }
      return error::outcome_unknown;
    }
    // Each receive (and each of a TLS record's) waits no longer than the
    // deadline: see detail::receive_deadline.
    ssize_t got = receive_some(chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;  // the deadline check above decides
    if (got <= 0) {
      close();  // end of file or a reset
      return error::outcome_unknown;
    }
    heard = true;
    buffer_.append(chunk, static_cast<std::size_t>(got));
  }
  if (!buffer_.empty()) {
    close();  // more than anyone asked for: out of step
    return error::outcome_unknown;
  }
  return {};
}

bool blocking_connection::stale() const noexcept {
  return fd_ >= 0 && cfg_.source && cfg_.source->generation() != generation_;
}

std::pair<error_code, response> blocking_connection::exec(const request& req) {
  if (stale()) close();  // the server moved (a failover): connect where it is now
  if (fd_ < 0) {
    if (auto ec = open()) return {ec, {}};
  }
  auto deadline = clock::now() + cfg_.command_timeout;
  bool wrote_any = false;
  if (auto ec = write_all(req.payload(), wrote_any)) return {ec, {}};
  response out;
  out.reserve(req.size());
  auto ec = read_replies(req.size(), out, deadline);
  last_used_ = clock::now();
  if (ec) return {ec, {}};
  // A master demoted since: the next command connects again, to where the
  // source finds the master then.
  if (cfg_.require_master && std::any_of(out.begin(), out.end(), detail::is_readonly)) close();
  return {error_code{}, std::move(out)};
}

std::pair<error_code, std::vector<value>> blocking_connection::eval_all(const std::vector<script_call>& calls) {
  if (calls.empty()) return {};
  // Connect first: a connect clears the cache, which must then record what
  // this pipeline loads.
  if (stale()) close();
  if (fd_ < 0) {
    if (auto ec = open()) return {ec, {}};
  }
  request req;
  std::vector<detail::script_cache::slot> at;
  at.reserve(calls.size());
  for (auto& c : calls) at.push_back(scripts_.push(req, c));
  auto [ec, r] = exec(req);
  // Every failure closed the socket, and the next connect clears the cache.
  if (ec) return {ec, {}};
  return detail::call_replies(scripts_, calls, at, r);
}

std::pair<error_code, value> blocking_connection::eval(const script& s, const std::vector<std::string>& keys,
                                                       const std::vector<std::string>& args) {
  // As eval_all with one call, without copying the call's keys and args.
  if (stale()) close();
  if (fd_ < 0) {
    if (auto ec = open()) return {ec, {}};
  }
  request req;
  auto at = scripts_.push(req, s, keys, args);
  auto [ec, r] = exec(req);
  if (ec) return {ec, {}};
  if (at.reply >= r.size()) return {make_error_code(error::unexpected_reply), {}};
  if (detail::is_noscript(r[at.reply])) {
    scripts_.forget(s);
    // The load itself failed (a script that does not compile): its error
    // says more than NOSCRIPT.
    if (at.loads && r[at.reply - 1].is_error()) return {make_error_code(error::server_error), std::move(r[at.reply - 1])};
    // Flushed since it was loaded: the call did not run; EVAL cannot meet
    // NOSCRIPT again.
    request again;
    detail::push_eval(again, "EVAL", s.source(), keys, args);
    auto [eec, er] = exec(again);
    return detail::single_reply(eec, er);
  }
  auto& v = r[at.reply];
  if (v.is_error()) return {make_error_code(error::server_error), std::move(v)};
  return {error_code{}, std::move(v)};
}

}  // namespace dlock::redis
