// The Redlock settings of the lock tests (fixtures and lock_worker): the
// URL's nodes, with a reply timeout that a loaded machine meets. With the
// default 100 ms, three test programs sharing 2 CPUs with their servers
// sometimes heard too few nodes in time (CI saw votes end in no_quorum and
// outcome_unknown): a test of what a lock does must not hinge on that.
#pragma once

#include <chrono>
#include <string_view>

#include <dlock/redis/redlock.hpp>
#include <support/polling.hpp>

namespace dlock::test {

/// The nodes of `url`, each vote waiting up to 500 ms (scaled) for them.
inline redis::redlock_config loaded_machine_redlock(std::string_view url) {
  auto cfg = redis::parse_redlock_url(url);
  cfg.reply_timeout = scaled(std::chrono::milliseconds(500));
  return cfg;
}

}  // namespace dlock::test
