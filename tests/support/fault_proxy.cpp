// fault_proxy's forwarding loop: one thread polls the listener, a wake pipe
// and both sockets of every connection; the test thread changes the fault
// settings under the mutex and wakes the loop so they apply at once.
#include "fault_proxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "loopback.hpp"

namespace dlock::test {

namespace {

using steady = std::chrono::steady_clock;
using detail::unique_fd;

// Bytes read from one side and not yet forwarded: past this the proxy stops
// reading that side, so a delayed direction pushes back on its sender
// through TCP instead of buffering without bound.
constexpr std::size_t max_queued = std::size_t{1} << 20;
constexpr std::size_t read_size = 64 * 1024;

struct chunk {
  std::string bytes;
  std::size_t sent = 0;
  steady::time_point due;  // not forwarded before this (the delay)
};

// One direction of a connection: what was read from its source and not
// yet written to its sink.
struct flow {
  std::deque<chunk> queue;
  std::size_t queued = 0;     // unsent bytes in `queue`
  steady::time_point last_due; // of the last chunk queued (trickling spaces them)
  bool eof = false;           // the source sent its FIN
  steady::time_point eof_due; // when to pass the FIN on (it is delayed too)
  bool shut = false;          // FIN passed on: shutdown(SHUT_WR) on the sink
};

struct connection {
  unique_fd client, server;
  bool connecting = false;  // the non-blocking connect to the target is pending
  flow up;                  // client -> server
  flow down;                // server -> client
  bool dead = false;        // broken: reset both sides at the next pass
};

// Closes with a reset rather than a FIN: what a broken path looks like to a
// peer once it notices.
void abort_fd(unique_fd& fd) {
  if (!fd) return;
  linger l{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  fd.reset();
}

bool can_read(const flow& f, bool stalled) { return !stalled && !f.eof && f.queued < max_queued; }

// True when `f` has bytes due and unsent: after flush() that means the sink
// was full, so the loop polls it for POLLOUT.
bool due_now(const flow& f, steady::time_point now) { return !f.queue.empty() && f.queue.front().due <= now; }

// The next moment something in `f` falls due, if it is still in the future.
void earliest(std::optional<steady::time_point>& next, const flow& f, steady::time_point now) {
  std::optional<steady::time_point> t;
  if (!f.queue.empty())
    t = f.queue.front().due;
  else if (f.eof && !f.shut)
    t = f.eof_due;
  if (t && *t > now && (!next || *t < *next)) next = t;
}

// How one direction's bytes are held back.
struct pace {
  std::chrono::milliseconds delay{0};    // each chunk, after it was read
  std::chrono::milliseconds trickle{0};  // between single bytes; zero: whole chunks
  std::chrono::milliseconds jitter{0};   // each chunk a further random 0..jitter
};

// Reads once from `fd` into `f`; false when the connection is broken. A
// chunk is never due before the one read ahead of it: jitter varies the
// wait, the stream keeps its order.
bool read_into(int fd, flow& f, pace p, std::vector<char>& buf, std::minstd_rand& random) {
  ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  auto due = steady::now() + p.delay;
  if (p.jitter.count() > 0)
    due = std::max(due + std::chrono::milliseconds(std::uniform_int_distribution<long long>(0, p.jitter.count())(random)),
                   f.last_due);
  if (n == 0) {
    f.eof = true;
    f.eof_due = std::max(due, f.last_due);
    return true;
  }
  auto size = static_cast<std::size_t>(n);
  if (p.trickle.count() == 0) {
    f.queue.push_back(chunk{std::string(buf.data(), size), 0, due});
    f.last_due = due;
  } else {
    for (std::size_t i = 0; i < size; ++i) {
      f.last_due = std::max(due, f.last_due + p.trickle);
      f.queue.push_back(chunk{std::string(1, buf[i]), 0, f.last_due});
    }
  }
  f.queued += size;
  return true;
}

// Writes what is due of `f` to `fd`, then its FIN once everything before it
// is out; false when the connection is broken.
bool flush(int fd, flow& f, steady::time_point now) {
  while (due_now(f, now)) {
    chunk& c = f.queue.front();
    ssize_t n = ::send(fd, c.bytes.data() + c.sent, c.bytes.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    c.sent += static_cast<std::size_t>(n);
    f.queued -= static_cast<std::size_t>(n);
    if (c.sent == c.bytes.size()) f.queue.pop_front();
  }
  if (f.eof && !f.shut && f.queue.empty() && f.eof_due <= now) {
    ::shutdown(fd, SHUT_WR);
    f.shut = true;
  }
  return true;
}

}  // namespace

struct fault_proxy::state : detail::loopback_service {
  std::uint16_t target = 0;
  std::vector<char> buf = std::vector<char>(read_size);  // loop thread only
  std::minstd_rand random{std::random_device{}()};       // loop thread only: jitter

  // Everything below is guarded by `m`. The loop holds it except while it
  // sits in poll(), so a setting changed by the test thread is seen before
  // the loop acts on anything poll() reported.
  std::condition_variable cut_done;
  bool stalled_up = false, stalled_down = false;
  pace pace_up, pace_down;
  bool refusing = false;
  std::uint64_t cuts_asked = 0, cuts_made = 0;
  std::size_t accepted = 0;
  std::list<connection> conns;  // a list: the loop keeps pointers across poll()

  void run();
  void accept_all();
  void cut_all();
  // Sets one part of the pace (`field`) in `dir`, never below zero.
  void set_pace(std::chrono::milliseconds pace::*field, std::chrono::milliseconds value, direction dir) {
    value = std::max(value, std::chrono::milliseconds::zero());
    std::lock_guard g(m);
    if (dir != direction::to_client) pace_up.*field = value;
    if (dir != direction::to_server) pace_down.*field = value;
    wake.notify();
  }
};

void fault_proxy::state::accept_all() {
  for (;;) {
    unique_fd client(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: the backlog is empty
    }
    ++accepted;
    if (refusing) continue;  // closed here: the client reads EOF
    unique_fd server(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!server) continue;
    detail::set_nodelay(client.get());
    detail::set_nodelay(server.get());
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(target);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool pending = false;
    if (::connect(server.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) continue;  // target down: the client reads EOF
      pending = true;
    }
    auto& c = conns.emplace_back();
    c.client = std::move(client);
    c.server = std::move(server);
    c.connecting = pending;
  }
}

void fault_proxy::state::cut_all() {
  // Connections the kernel has completed but the loop not yet accepted look
  // open to their clients, so they are cut as well.
  accept_all();
  for (auto& c : conns) {
    abort_fd(c.client);
    abort_fd(c.server);
  }
  conns.clear();
  cuts_made = cuts_asked;
  cut_done.notify_all();
}

void fault_proxy::state::run() {
  std::vector<pollfd> fds;
  std::vector<connection*> polled;  // polled[k] owns fds[2 + 2k] and fds[3 + 2k]
  std::unique_lock lock(m);
  while (!stopping) {
    if (cuts_made != cuts_asked) cut_all();

    // Forward what is due, drop finished connections, and collect what to
    // wait for: a descriptor with nothing wanted is left out (fd -1), so a
    // stalled side's hang-up cannot make poll() spin.
    auto now = steady::now();
    std::optional<steady::time_point> next;
    fds.clear();
    polled.clear();
    fds.push_back({wake.fd(), POLLIN, 0});
    fds.push_back({listener.get(), POLLIN, 0});
    for (auto it = conns.begin(); it != conns.end();) {
      connection& c = *it;
      if (!c.dead && !stalled_up && !c.connecting) c.dead = !flush(c.server.get(), c.up, now);
      if (!c.dead && !stalled_down) c.dead = !flush(c.client.get(), c.down, now);
      if (c.dead || (c.up.shut && c.down.shut)) {
        if (c.dead) {  // pass the breakage on to the other side
          abort_fd(c.client);
          abort_fd(c.server);
        }
        it = conns.erase(it);
        continue;
      }
      short client_events = 0, server_events = 0;
      if (can_read(c.up, stalled_up)) client_events |= POLLIN;
      if (!stalled_down && due_now(c.down, now)) client_events |= POLLOUT;
      if (c.connecting) {
        server_events = POLLOUT;
      } else {
        if (can_read(c.down, stalled_down)) server_events |= POLLIN;
        if (!stalled_up && due_now(c.up, now)) server_events |= POLLOUT;
        if (!stalled_up) earliest(next, c.up, now);
      }
      if (!stalled_down) earliest(next, c.down, now);
      fds.push_back({client_events ? c.client.get() : -1, client_events, 0});
      fds.push_back({server_events ? c.server.get() : -1, server_events, 0});
      polled.push_back(&c);
      ++it;
    }
    int timeout = -1;
    if (next) {
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
      timeout = static_cast<int>(std::min<decltype(wait)>(wait, INT_MAX));
    }

    lock.unlock();
    int ready = ::poll(fds.data(), fds.size(), timeout);
    lock.lock();
    if (ready < 0) continue;  // EINTR
    if (fds[0].revents) wake.drain();
    if (stopping || cuts_made != cuts_asked) continue;  // handled at the top

    for (std::size_t k = 0; k < polled.size(); ++k) {
      connection& c = *polled[k];
      short client_ready = fds[2 + 2 * k].revents, server_ready = fds[3 + 2 * k].revents;
      if ((client_ready | server_ready) & POLLNVAL) {
        c.dead = true;
        continue;
      }
      if (c.connecting && server_ready) {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(c.server.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
          c.dead = true;  // the target refused: the client sees a reset
          continue;
        }
        c.connecting = false;
        server_ready = 0;  // that was the connect completing, not data
      }
      // Settings are re-read here, after poll(): a stall() made while the
      // loop waited holds even for bytes that arrived in the meantime.
      constexpr short readable = POLLIN | POLLHUP | POLLERR;
      if ((client_ready & readable) && can_read(c.up, stalled_up))
        c.dead = !read_into(c.client.get(), c.up, pace_up, buf, random);
      if (!c.dead && (server_ready & readable) && can_read(c.down, stalled_down))
        c.dead = !read_into(c.server.get(), c.down, pace_down, buf, random);
    }
    if (fds[1].revents) accept_all();
  }
}

fault_proxy::fault_proxy(std::uint16_t target_port) : state_(std::make_unique<state>()) {
  state_->target = target_port;
  state_->start([s = state_.get()] { s->run(); });
}

fault_proxy::~fault_proxy() { state_->stop(); }  // its members close every connection

std::uint16_t fault_proxy::port() const { return state_->port; }

std::string fault_proxy::url() const { return state_->url(); }

void fault_proxy::stall(direction d) {
  std::lock_guard g(state_->m);
  if (d != direction::to_client) state_->stalled_up = true;
  if (d != direction::to_server) state_->stalled_down = true;
  state_->wake.notify();
}

void fault_proxy::resume() {
  std::lock_guard g(state_->m);
  state_->stalled_up = state_->stalled_down = false;
  state_->wake.notify();
}

void fault_proxy::delay(std::chrono::milliseconds d, direction dir) { state_->set_pace(&pace::delay, d, dir); }

void fault_proxy::jitter(std::chrono::milliseconds spread, direction dir) {
  state_->set_pace(&pace::jitter, spread, dir);
}

void fault_proxy::trickle(std::chrono::milliseconds every, direction dir) {
  state_->set_pace(&pace::trickle, every, dir);
}

void fault_proxy::cut() {
  std::unique_lock lock(state_->m);
  auto ticket = ++state_->cuts_asked;
  state_->wake.notify();
  state_->cut_done.wait(lock, [&] { return state_->cuts_made >= ticket; });
}

void fault_proxy::refuse(bool on) {
  std::lock_guard g(state_->m);
  state_->refusing = on;
}

std::size_t fault_proxy::connections() const {
  std::lock_guard g(state_->m);
  return state_->conns.size();
}

std::size_t fault_proxy::accepted() const {
  std::lock_guard g(state_->m);
  return state_->accepted;
}

}  // namespace dlock::test
