#include "support/placement.hpp"

#include <vector>

namespace dlock::test {

bool parse_placement(std::string_view text, placement& out) {
  if (text == "split") out = placement::split;
  else if (text == "same") out = placement::same;
  else if (text == "free") out = placement::free;
  else return false;
  return true;
}

const char* placement_name(placement p) {
  switch (p) {
    case placement::split: return "split";
    case placement::same: return "same";
    case placement::free: return "free";
  }
  return "?";
}

namespace {

cpu_set_t only(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return s;
}

}  // namespace

pinned::pinned(placement p, pid_t server) {
  if (p == placement::free) {
    what_ = "not pinned";
    return;
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    what_ = "not pinned (cannot read this thread's CPUs)";
    return;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2 && p == placement::split) {
    what_ = "not pinned (one CPU)";
    return;
  }
  const int server_cpu = cpus[0], client_cpu = p == placement::split ? cpus[1] : cpus[0];
  client_before_ = allowed;
  auto client = only(client_cpu);
  client_set_ = sched_setaffinity(0, sizeof client, &client) == 0;
  if (!client_set_) {
    what_ = "not pinned (no permission)";
    return;
  }
  what_ = "client on CPU " + std::to_string(client_cpu);
  if (server > 0 && sched_getaffinity(server, sizeof server_before_, &server_before_) == 0) {
    auto s = only(server_cpu);
    server_set_ = sched_setaffinity(server, sizeof s, &s) == 0;
    if (server_set_) server_ = server;
  }
  what_ = server_set_ ? "server on CPU " + std::to_string(server_cpu) + ", " + what_ : what_ + ", server not pinned";
}

pinned::~pinned() {
  if (server_set_) sched_setaffinity(server_, sizeof server_before_, &server_before_);
  if (client_set_) sched_setaffinity(0, sizeof client_before_, &client_before_);
}

}  // namespace dlock::test
