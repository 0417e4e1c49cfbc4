// What a connection does when only a master will do and its address must be
// asked for: waiting for an address_source's answer, telling whether the
// source has moved on since, and recognising a demoted master's refusal.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/address_source.hpp>
#include <dlock/redis/resp.hpp>

namespace dlock::redis::detail {

/// "READONLY You can't write against a read only replica.": the server
/// reached as a master is a replica now. The command did not run.
inline bool is_readonly(const value& v) { return v.is_error() && v.str.compare(0, 8, "READONLY") == 0; }

/// One question to an address source, while a run loop waits for it. The
/// source answers on the loop's strand; the answer is kept here and the
/// loop woken by a timer, which stop() also cancels (see wake()).
class address_lookup {
 public:
  using strand_type = asio::strand<asio::any_io_executor>;

  explicit address_lookup(const strand_type& s) : wake_(s, asio::steady_timer::clock_type::time_point::max()) {}

  /// Asks `source` and waits for its answer, or for `stopping` to be set
  /// and the wait woken (then shutting_down). `current` holds the lookup
  /// while it runs, so that stop() can wake it.
  static asio::awaitable<std::pair<error_code, address>> ask(address_source& source, const strand_type& strand,
                                                             std::shared_ptr<address_lookup>& current,
                                                             const bool& stopping) {
    auto lookup = std::make_shared<address_lookup>(strand);
    current = lookup;
    source.async_find(strand, [lookup](error_code ec, address a) {
      lookup->answer_.emplace(ec, std::move(a));
      lookup->wake_.cancel();
    });
    while (!lookup->answer_ && !stopping) co_await lookup->wake_.async_wait(asio::as_tuple(asio::use_awaitable));
    current.reset();
    if (!lookup->answer_) co_return std::pair{error_code(error::shutting_down), address{}};
    co_return std::move(*lookup->answer_);
  }

  /// From the strand: the waiting loop looks at `stopping` again.
  void wake() { wake_.cancel(); }

 private:
  asio::steady_timer wake_;
  std::optional<std::pair<error_code, address>> answer_;
};

/// Whether the source has learned of another server than `reached` (a
/// failover announced while the connect ran): the connection is then not
/// to the master.
inline bool source_moved_on(const config& cfg, const address& reached) {
  if (!cfg.source) return false;
  auto now_at = cfg.source->last_found();
  return now_at && *now_at != reached;
}

}  // namespace dlock::redis::detail
