#include "support/redis_py_lock.hpp"

#include <chrono>
#include <sstream>
#include <stdexcept>

namespace dlock::test {

redis_py_lock::redis_py_lock(const std::string& python, const std::string& script, const std::string& url,
                             const std::string& key)
    : child_(std::make_unique<child_process>(python, std::vector<std::string>{script, "serve", url, key}, true)) {
  auto line = child_->read_line(std::chrono::seconds(60));
  if (line != "ready") {
    int rc = line.empty() ? child_->wait() : -1;
    throw std::runtime_error("redis-py's lock did not start (" +
                             (line.empty() ? "it exited with " + std::to_string(rc) : "it said '" + line + "'") + ")");
  }
}

redis_py_lock::~redis_py_lock() {
  child_->close_input();
  // It ends at the end of its input; the child's destructor kills it if not.
  child_->read_line(std::chrono::seconds(5));
}

std::string redis_py_lock::ask(const std::string& request, const std::string& answer) {
  if (!child_->write(request + "\n")) throw std::runtime_error("redis-py's lock is gone (its input is closed)");
  auto line = child_->read_line(std::chrono::seconds(60));
  if (line.compare(0, answer.size() + 1, answer + " ") != 0)
    throw std::runtime_error("redis-py's lock answered '" + line + "' to '" + request + "'");
  return line.substr(answer.size() + 1);
}

std::vector<double> redis_py_lock::cycles(int n) {
  std::istringstream in(ask("cycles " + std::to_string(n), "samples"));
  std::vector<double> out;
  for (double v; in >> v;) out.push_back(v);
  if (out.size() != static_cast<std::size_t>(n))
    throw std::runtime_error("redis-py's lock gave " + std::to_string(out.size()) + " of " + std::to_string(n) + " samples");
  return out;
}

}  // namespace dlock::test
