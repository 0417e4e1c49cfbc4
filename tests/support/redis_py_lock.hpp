// redis-py's Lock (Debian's python3-redis) in a child process, driven one
// block of cycles at a time, so that its uncontended cycle can
// alternate with dlock's in the same run, on the same server: the reference
// of dlock-compare and of bench_cycle. The child is
// compare/redis_py_lock.py in its `serve` mode.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "support/child_process.hpp"

namespace dlock::test {

class redis_py_lock {
 public:
  /// Starts `python script serve url key` and waits (up to 60 s) until its
  /// lock has done a few warm-up cycles. Throws std::runtime_error saying
  /// what went wrong (no interpreter, no redis module, a URL it cannot use).
  redis_py_lock(const std::string& python, const std::string& script, const std::string& url, const std::string& key);
  /// Closes its input and reaps it.
  ~redis_py_lock();
  redis_py_lock(const redis_py_lock&) = delete;
  redis_py_lock& operator=(const redis_py_lock&) = delete;

  /// `n` cycles of acquire() + release() back to back, each as the child
  /// timed it (microseconds). Throws std::runtime_error if the child failed.
  std::vector<double> cycles(int n);

 private:
  std::string ask(const std::string& request, const std::string& answer);
  std::unique_ptr<child_process> child_;
};

}  // namespace dlock::test
