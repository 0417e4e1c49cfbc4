#include "support/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>

#include <cerrno>
#include <utility>
#include <system_error>

extern char** environ;

namespace dlock::test {

child_process::child_process(std::string path, const std::vector<std::string>& args, bool with_input) {
  int fds[2], in[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::system_category(), "pipe");
  if (with_input && ::pipe2(in, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::system_error(e, std::system_category(), "pipe");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  if (with_input) posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  std::vector<char*> argv;
  argv.push_back(path.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = ::posix_spawn(&pid_, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (with_input) ::close(in[0]);
  if (rc != 0) {
    ::close(fds[0]);
    if (with_input) ::close(in[1]);
    pid_ = -1;
    throw std::system_error(rc, std::system_category(), "posix_spawn " + path);
  }
  out_ = fds[0];
  in_ = in[1];
}

child_process::~child_process() {
  close_input();
  kill();
  if (out_ >= 0) ::close(out_);
}

bool child_process::write(const std::string& text) {
  std::size_t off = 0;
  while (in_ >= 0 && off < text.size()) {
    // MSG_NOSIGNAL is for sockets: a child gone must not kill us with SIGPIPE.
    sigset_t pipe_signal, old;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
    ssize_t n = ::write(in_, text.data() + off, text.size() - off);
    int e = errno;
    if (n < 0 && e == EPIPE) {
      timespec zero{};
      sigtimedwait(&pipe_signal, nullptr, &zero);  // consume the pending SIGPIPE
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (n < 0 && e == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return in_ >= 0;
}

void child_process::close_input() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

bool child_process::fill(std::chrono::steady_clock::time_point deadline, bool& eof) {
  eof = false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left <= std::chrono::milliseconds::zero()) return false;
  pollfd p{out_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char buf[4096];
  ssize_t n = ::read(out_, buf, sizeof buf);
  if (n <= 0) {
    eof = true;
    return false;
  }
  buffer_.append(buf, static_cast<std::size_t>(n));
  return true;
}

std::string child_process::read_line(std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    bool eof = false;
    if (!fill(deadline, eof)) return {};
  }
}

std::string child_process::read_rest(std::chrono::milliseconds limit, bool& complete) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool eof = false;
  while (fill(deadline, eof)) {
  }
  complete = eof;
  return std::exchange(buffer_, std::string());
}

int child_process::wait() {
  if (pid_ < 0) return -1;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

void child_process::kill() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);
  wait();
}

}  // namespace dlock::test
