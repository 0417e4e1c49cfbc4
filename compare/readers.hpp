// dlock-compare's readers phase: what a read-write lock's sharing buys, and
// what a writer waits behind a stream of readers. W workers take one
// ownership::ReadWrite shared, and W take one ownership::Token, in runs
// that alternate (acquisitions per second, the most holders at once, the
// server's commands per acquisition); then a writer asks for a lock that
// four readers keep shared by taking turns, with and without its intent,
// alternating (how long it waited, and whether it gave up).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <dlock/backend/redis.hpp>

#include "workers.hpp"

namespace dlock::compare {

struct readers_result {
  int workers = 0;
  std::chrono::milliseconds work{0};       ///< how long each hold lasts
  std::string shared_combination;          ///< the read-write lock, taken shared
  std::string exclusive_combination;       ///< the token lock it is compared with
  worker_run shared, exclusive;            ///< the last run of each
  std::vector<double> rate_pairs;          ///< per pair of runs: shared acquisitions/s over exclusive
  std::chrono::milliseconds stream_hold{0};       ///< each reader's hold in the stream
  std::chrono::milliseconds writer_deadline{0};   ///< how long the writer waits at most
  std::vector<double> wait_with_intent_ms;        ///< the writer's wait in each run, with its intent
  std::vector<double> wait_without_intent_ms;     ///< the same without (the deadline when it gave up)
  int gave_up_with = 0, gave_up_without = 0;      ///< runs in which the writer did not get in
};

/// Runs both parts on `url` (keys under `prefix`), each rate run `duration`
/// long, `pairs` times (A B, then B A); commands counted on `info`.
readers_result run_readers(RedisBackend& info, const std::string& url, const std::string& prefix, int workers,
                           std::chrono::milliseconds duration, int pairs);

std::string readers_table(const readers_result& r);
std::string readers_json(const readers_result& r);

}  // namespace dlock::compare
