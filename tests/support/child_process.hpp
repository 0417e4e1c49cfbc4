// A child process whose standard output the parent reads line by line:
// the lock tests' worker processes and dlock-compare's. Plain POSIX.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dlock::test {

/// Runs `path` with `args` (stdout to a pipe, stderr inherited; stdin a
/// pipe too when `with_input`, else inherited); killed (SIGKILL) and reaped
/// on destruction if still running.
class child_process {
 public:
  child_process(std::string path, const std::vector<std::string>& args, bool with_input = false);
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// Reads one line of the child's output (waits up to `limit`); empty on
  /// timeout or end of output.
  std::string read_line(std::chrono::milliseconds limit = std::chrono::seconds(20));
  /// Reads everything until the child closes its output or `limit` passes;
  /// `complete` says which.
  std::string read_rest(std::chrono::milliseconds limit, bool& complete);
  /// Waits for the child to exit; returns its exit status (or -signal).
  int wait();
  /// Writes `text` to the child's standard input (with_input only); false
  /// if the child closed it or there is none.
  bool write(const std::string& text);
  /// Closes the child's standard input: it reads the end of its input.
  void close_input();
  void kill();
  pid_t pid() const { return pid_; }

 private:
  // Reads what is there within `limit` into buffer_; false at end of output
  // or timeout.
  bool fill(std::chrono::steady_clock::time_point deadline, bool& eof);

  pid_t pid_ = -1;
  int out_ = -1;
  int in_ = -1;
  std::string buffer_;
};

}  // namespace dlock::test
