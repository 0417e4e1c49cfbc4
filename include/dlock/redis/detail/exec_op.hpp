// A request on its way through a connection: its bytes, how many replies it
// awaits, where it stands, and the completion that is called exactly once.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include <boost/system/error_code.hpp>

#include <dlock/redis/request.hpp>

namespace dlock::redis::detail {

// Lives on the connection's strand; knows nothing of sockets or executors,
// so that the request queue can be driven (and tested) without them.
struct exec_op {
  enum class stage : unsigned char { queued, written, done };

  std::string payload;
  std::size_t expected = 0;
  response replies;
  stage state = stage::queued;
  std::chrono::steady_clock::time_point deadline{};
  std::chrono::steady_clock::time_point written_at{};  // when the writer took it

  virtual ~exec_op() = default;
  virtual void complete(boost::system::error_code ec, response r) = 0;
};

}  // namespace dlock::redis::detail
