// SentinelBackend: locks on a master that Redis Sentinel watches. The
// sentinels say where the master is; the connections ask them at every
// (re)connect, check with ROLE that they reached a master, and follow a
// failover the moment the sentinels announce it.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include <dlock/backend/redis.hpp>
#include <dlock/redis/sentinel.hpp>

namespace dlock {

namespace redis::detail {
class sentinel_source;
struct sentinel_follower;
}  // namespace redis::detail

namespace redis::sentinel_engine {
// Not ext: SentinelBackend's engine (asking the sentinels, following
// +switch-master) is compiled into libdlock; these are its own types.
using detail::sentinel_follower;
using detail::sentinel_source;
}  // namespace redis::sentinel_engine

/// A master with replicas, watched by Sentinel. Everything RedisBackend
/// does, on whichever node is the master now:
/// - every connect asks the sentinels (`SENTINEL GET-MASTER-ADDR-BY-NAME`,
///   in order; the first that answers is asked first from then on) and
///   checks with ROLE that the node is a master (a replica, or a master the
///   sentinels have not caught up with, is refused: error::not_master, and
///   the connection asks again after its backoff);
/// - a watch connection to one sentinel subscribes to `+switch-master`:
///   when the sentinels promote a replica, the connections to the old
///   master are closed at once and connect to the new one, without waiting
///   for a broken socket or a timeout (and after the watch reconnects, the
///   sentinels are asked again, in case an announcement was missed);
/// - a READONLY reply (the node was demoted) ends the connection once what
///   was written on it is answered; the next connect asks again.
/// What was written to the old master and not answered completes with
/// outcome_unknown, as on one server; nothing is sent again by itself.
/// Channels are subscribed again on the new master, and their listeners
/// told that messages may have been missed (the waiters look at the key
/// again). A renewal that finds the key gone on the new master signals
/// the loss, as on one server.
///
/// The blocking fast path connects where the sentinels said the master was
/// last, and moves when they say it moved.
class SentinelBackend : public RedisBackend {
 public:
  /// Parses `url` (see redis::parse_sentinel_url), starts a private I/O
  /// thread, finds the master and connects. Throws std::system_error when
  /// the URL is malformed (invalid_url) or the first connect fails:
  /// no_sentinel (none reachable), unknown_master (no sentinel knows the
  /// name), not_master, auth_failed, connect_timeout, ...
  explicit SentinelBackend(std::string_view url);
  /// As above, from settings; also invalid_argument when they cannot work
  /// (no sentinel, no master name, `master.acknowledge`, TLS settings).
  explicit SentinelBackend(redis::sentinel_config cfg);
  /// Runs on `ex` (which the caller keeps running); connects in the
  /// background, and the first commands wait for it. Throws
  /// std::system_error only for settings that cannot work (invalid_argument).
  SentinelBackend(executor_type ex, redis::sentinel_config cfg);
  /// As above, from `url` (see redis::parse_sentinel_url; invalid_url when
  /// malformed).
  SentinelBackend(executor_type ex, std::string_view url);
  ~SentinelBackend();

  /// One `Service` per backend, made on first use as `Service(*this)`.
  template <class Service>
  Service& use_service() {
    return core().use_service<Service>(*this);
  }

  /// The Sentinel settings, as given or parsed from the URL. (settings() is
  /// the master connections': `master`, with `source` and `require_master` set.)
  const redis::sentinel_config& sentinel_settings() const noexcept { return sentinel_cfg_; }
  /// Where the sentinels said the master was, last time they were asked.
  std::optional<redis::address> master_address() const;
  /// Failovers followed so far (`+switch-master` announcements for this
  /// master, and changes found by asking again).
  std::size_t failovers_seen() const noexcept;
  /// The connection that watches the sentinels (for tests).
  redis::subscriber& sentinel_watch() noexcept { return *watch_; }

 private:
  struct with_source {};
  SentinelBackend(with_source, std::shared_ptr<redis::sentinel_engine::sentinel_source> source, redis::sentinel_config cfg);
  SentinelBackend(with_source, executor_type ex, std::shared_ptr<redis::sentinel_engine::sentinel_source> source,
                  redis::sentinel_config cfg);
  void start_watch();

  redis::sentinel_config sentinel_cfg_;
  std::shared_ptr<redis::sentinel_engine::sentinel_source> source_;
  std::unique_ptr<redis::subscriber> watch_;
  std::shared_ptr<redis::sentinel_engine::sentinel_follower> follower_;  // the watch's listener and its retries
};

}  // namespace dlock
