// fake_redis's server loop: a bounds-checked incremental RESP2 request
// parser, the default replies a real client's handshake needs, and one
// thread polling the listener, a wake pipe and every client.
#include "fake_redis.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <exception>
#include <list>
#include <mutex>
#include <thread>

#include "loopback.hpp"

namespace dlock::test {

namespace {

using detail::unique_fd;

// Limits past which a request is rejected as absurd, as Redis does (its
// limits are 1M arguments and 512 MB per argument; a test needs far less).
constexpr long long max_args = 1024 * 1024;
constexpr long long max_bulk = 64LL * 1024 * 1024;
constexpr std::size_t max_pending_input = 128 * 1024 * 1024;
constexpr std::size_t max_header = 32;  // "*<count>" or "$<length>" without CRLF
// Replies not yet taken by a client: past this the server stops reading it.
constexpr std::size_t max_pending_output = 4 * 1024 * 1024;
constexpr std::size_t read_size = 64 * 1024;

enum class parse_status { done, incomplete, invalid };

// Parses "<prefix><integer>\r\n" at in[pos]; on done, `pos` moves past it.
parse_status parse_header(std::string_view in, std::size_t& pos, char prefix, long long& value) {
  if (pos >= in.size()) return parse_status::incomplete;
  if (in[pos] != prefix) return parse_status::invalid;
  auto end = in.find("\r\n", pos + 1);
  if (end == std::string_view::npos)
    return in.size() - pos > max_header + 1 ? parse_status::invalid : parse_status::incomplete;
  if (end - pos - 1 > max_header) return parse_status::invalid;
  const char* first = in.data() + pos + 1;
  const char* last = in.data() + end;
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last || first == last) return parse_status::invalid;
  pos = end + 2;
  return parse_status::done;
}

// Parses one request ("*<n>\r\n" then n "$<len>\r\n<bytes>\r\n") at in[pos].
// On done `pos` moves past it and `command` holds it (empty for "*0" or a
// negative count, which Redis ignores too); otherwise `pos` is unchanged.
parse_status parse_request(std::string_view in, std::size_t& pos, std::vector<std::string>& command) {
  command.clear();
  std::size_t p = pos;
  long long count = 0;
  if (auto s = parse_header(in, p, '*', count); s != parse_status::done) return s;
  if (count > max_args) return parse_status::invalid;
  for (long long i = 0; i < count; ++i) {
    long long length = 0;
    if (auto s = parse_header(in, p, '$', length); s != parse_status::done) return s;
    if (length < 0 || length > max_bulk) return parse_status::invalid;
    auto size = static_cast<std::size_t>(length);
    if (in.size() - p < size + 2) return parse_status::incomplete;
    if (in[p + size] != '\r' || in[p + size + 1] != '\n') return parse_status::invalid;
    command.emplace_back(in.substr(p, size));
    p += size + 2;
  }
  pos = p;
  return parse_status::done;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto& ch : out) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

// `text` made safe for a one-line error reply: no CR, LF or other controls.
std::string one_line(std::string_view text, std::size_t limit = 128) {
  std::string out(text.substr(0, limit));
  for (auto& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return out;
}

std::string bulk(std::string_view s) { return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n"; }

// SHA-1 in hex, so SCRIPT LOAD answers what a real server (and a client's
// own EVALSHA digest) would.
std::string sha1_hex(std::string_view data) {
  std::uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::string msg(data);
  msg += static_cast<char>(0x80);
  while (msg.size() % 64 != 56) msg += '\0';
  auto bits = static_cast<std::uint64_t>(data.size()) * 8;
  for (int i = 7; i >= 0; --i) msg += static_cast<char>((bits >> (8 * i)) & 0xff);
  for (std::size_t block = 0; block < msg.size(); block += 64) {
    std::uint32_t w[80];
    for (std::size_t i = 0; i < 16; ++i) {
      w[i] = 0;
      for (std::size_t b = 0; b < 4; ++b)
        w[i] = (w[i] << 8) | static_cast<unsigned char>(msg[block + 4 * i + b]);
    }
    for (std::size_t i = 16; i < 80; ++i) w[i] = std::rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (std::size_t i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) {
        f = (b & c) | (~b & d);
        k = 0x5A827999;
      } else if (i < 40) {
        f = b ^ c ^ d;
        k = 0x6ED9EBA1;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d);
        k = 0x8F1BBCDC;
      } else {
        f = b ^ c ^ d;
        k = 0xCA62C1D6;
      }
      std::uint32_t t = std::rotl(a, 5) + f + e + k + w[i];
      e = d;
      d = c;
      c = std::rotl(b, 30);
      b = a;
      a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (auto word : h)
    for (int shift = 28; shift >= 0; shift -= 4) out += digits[(word >> shift) & 0xf];
  return out;
}

// What a command gets when the responder has no opinion: enough for a real
// client's connection handshake to succeed.
std::string default_reply(const std::vector<std::string>& command) {
  auto name = upper(command[0]);
  if (name == "PING") return command.size() > 1 ? bulk(command[1]) : "+PONG\r\n";
  if (name == "CLIENT" || name == "SELECT" || name == "AUTH") return "+OK\r\n";
  if (name == "SCRIPT" && command.size() > 2 && upper(command[1]) == "LOAD") return bulk(sha1_hex(command[2]));
  return "-ERR fake_redis: no reply scripted for " + one_line(name) + "\r\n";
}

struct client {
  unique_fd fd;
  std::string in;         // received, not yet parsed
  std::string out;        // replies not yet sent
  bool closing = false;   // protocol error: close once the error is sent
  bool dead = false;
};

}  // namespace

struct fake_redis::state : detail::loopback_service {
  std::vector<char> buf = std::vector<char>(read_size);  // loop thread only
  std::list<client> clients;                             // loop thread only

  // Guarded by `m`; the loop takes it only briefly, never while it calls
  // the responder, so a responder may call commands() or set_responder().
  std::shared_ptr<const responder> respond;
  std::vector<std::vector<std::string>> log;

  void run();
  void accept_all();
  void receive(client& c);
  std::string answer(const std::vector<std::string>& command);
};

std::string fake_redis::state::answer(const std::vector<std::string>& command) {
  std::shared_ptr<const responder> r;
  {
    std::lock_guard g(m);
    log.push_back(command);
    r = respond;
  }
  if (r && *r) {
    try {
      if (auto reply = (*r)(command)) return *std::move(reply);
    } catch (const std::exception& e) {
      return "-ERR fake_redis: responder threw: " + one_line(e.what()) + "\r\n";
    } catch (...) {
      return "-ERR fake_redis: responder threw\r\n";
    }
  }
  return default_reply(command);
}

void fake_redis::state::receive(client& c) {
  ssize_t n = ::recv(c.fd.get(), buf.data(), buf.size(), 0);
  if (n < 0) {
    c.dead = errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    return;
  }
  if (n == 0) {  // like Redis, replies to a client that hung up are dropped
    c.dead = true;
    return;
  }
  c.in.append(buf.data(), static_cast<std::size_t>(n));
  std::size_t pos = 0;
  std::vector<std::string> command;
  for (;;) {
    auto s = parse_request(c.in, pos, command);
    if (s == parse_status::incomplete) break;
    if (s == parse_status::invalid) {
      c.out += "-ERR Protocol error: fake_redis expects arrays of bulk strings with sane lengths\r\n";
      c.closing = true;
      break;
    }
    if (!command.empty()) c.out += answer(command);
  }
  c.in.erase(0, pos);
  if (!c.closing && c.in.size() > max_pending_input) {
    c.out += "-ERR Protocol error: request too large\r\n";
    c.closing = true;
  }
}

void fake_redis::state::accept_all() {
  for (;;) {
    unique_fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: the backlog is empty
    }
    detail::set_nodelay(fd.get());
    clients.emplace_back().fd = std::move(fd);
  }
}

void fake_redis::state::run() {
  std::vector<pollfd> fds;
  std::vector<client*> polled;  // polled[k] owns fds[2 + k]
  for (;;) {
    {
      std::lock_guard g(m);
      if (stopping) return;
    }
    fds.clear();
    polled.clear();
    fds.push_back({wake.fd(), POLLIN, 0});
    fds.push_back({listener.get(), POLLIN, 0});
    for (auto& c : clients) {
      short events = 0;
      // A client that does not read its replies is not read either.
      if (c.out.size() < max_pending_output) events |= POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd.get(), events, 0});
      polled.push_back(&c);
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents) wake.drain();
    for (std::size_t k = 0; k < polled.size(); ++k) {
      client& c = *polled[k];
      short ready = fds[2 + k].revents;
      if (ready & POLLNVAL) c.dead = true;
      if (!c.dead && (ready & (POLLIN | POLLHUP | POLLERR))) receive(c);
      while (!c.dead && !c.out.empty()) {
        ssize_t sent = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (sent < 0) {
          if (errno == EINTR) continue;
          c.dead = errno != EAGAIN && errno != EWOULDBLOCK;
          break;
        }
        c.out.erase(0, static_cast<std::size_t>(sent));
      }
      // Best effort for the protocol error: it is sent if the socket takes
      // it now, and the connection closes either way.
      if (c.closing) c.dead = true;
    }
    clients.remove_if([](const client& c) { return c.dead; });
    if (fds[1].revents) accept_all();
  }
}

fake_redis::fake_redis(responder r) : state_(std::make_unique<state>()) {
  state_->respond = std::make_shared<const responder>(std::move(r));
  state_->start([s = state_.get()] { s->run(); });
}

fake_redis::~fake_redis() { state_->stop(); }  // its members close every client

std::uint16_t fake_redis::port() const { return state_->port; }

std::string fake_redis::url() const { return state_->url(); }

void fake_redis::set_responder(responder r) {
  auto next = std::make_shared<const responder>(std::move(r));
  std::lock_guard g(state_->m);
  state_->respond = std::move(next);
}

std::vector<std::vector<std::string>> fake_redis::commands() const {
  std::lock_guard g(state_->m);
  return state_->log;
}

std::size_t fake_redis::count(std::string_view name) const {
  auto wanted = upper(name);
  std::lock_guard g(state_->m);
  return static_cast<std::size_t>(std::count_if(state_->log.begin(), state_->log.end(), [&](const auto& command) {
    return !command.empty() && upper(command[0]) == wanted;
  }));
}

}  // namespace dlock::test
