// Where the measuring client and the server run. On a small virtual machine
// a round trip between two processes on different CPUs costs a wake-up of
// the other CPU (several times the round trip on one CPU), and the
// scheduler moves processes between the two cases from one moment to the
// next; so a figure that compares two clients pins both the same way.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <string>
#include <string_view>

namespace dlock::test {

/// How to place the client and the server:
/// - split: the server's main thread on the first CPU, the client on
///   another (every round trip crosses CPUs, as it would cross a network);
/// - same: both on the first CPU;
/// - free: wherever the scheduler puts them.
enum class placement { split, same, free };

/// "split", "same" or "free"; false if `text` is none of them.
bool parse_placement(std::string_view text, placement& out);
const char* placement_name(placement p);

/// Pins the calling thread (and so the threads and processes it starts
/// afterwards) and, when `server` is a process id, the server's main thread,
/// as `p` says; restores both on destruction. Where it cannot (one CPU, no
/// permission, a server it cannot reach) it pins nothing and `describe()`
/// says so.
class pinned {
 public:
  pinned(placement p, pid_t server);
  ~pinned();
  pinned(const pinned&) = delete;
  pinned& operator=(const pinned&) = delete;
  /// What was done, for a report: "server on CPU 0, client on CPU 1".
  const std::string& describe() const { return what_; }

 private:
  cpu_set_t client_before_{}, server_before_{};
  bool client_set_ = false, server_set_ = false;
  pid_t server_ = -1;
  std::string what_;
};

}  // namespace dlock::test
