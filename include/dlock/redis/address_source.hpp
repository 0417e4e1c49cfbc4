// Where a connection connects when the address must be asked for: the
// interface a connection calls at every (re)connect (Sentinel's "where is
// the master?" is one answer to it).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include <boost/asio/any_io_executor.hpp>

#include <dlock/redis/config.hpp>
#include <dlock/redis/error_code.hpp>

namespace dlock::redis {

/// Finds the address of the server a connection should use. Shared by every
/// connection of one backend (the command connection, the subscriber, the
/// blocking connections); all members may be called from any thread.
class address_source {
 public:
  virtual ~address_source() = default;

  /// Finds where to connect now, and calls `done` once, on `ex`, with the
  /// address or with an error (a connection error, or one of not_master,
  /// unknown_master, no_sentinel). It must complete within a bounded time
  /// of its own (a connection's run loop waits for it).
  virtual void async_find(boost::asio::any_io_executor ex, std::function<void(error_code, address)> done) = 0;

  /// The address found last, if any: where connections that cannot wait
  /// for async_find (blocking ones) connect.
  virtual std::optional<address> last_found() const = 0;

  /// Grows whenever the address found changes: a connection made to an
  /// older one is stale.
  virtual std::uint64_t generation() const = 0;
};

}  // namespace dlock::redis
