// ownership::GetSetExpiry: redis-objects' lock (A3): the value is the
// expiration time, and an expired lock is stolen with GETSET.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <dlock/ext.hpp>
#include <dlock/ownership/expiry_value.hpp>

namespace dlock::ownership {

/// The Ruby gem redis-objects' lock: the key's value is its expiration, as
/// epoch seconds with a fraction; the key itself never expires.
/// - acquire: `SETNX name expiration`; if held, `GET name`, and if that time
///   has passed, `GETSET name new_expiration`: whoever reads back a time in
///   the past was first to steal it (GETSET stops the race in which two
///   waiters both DEL and both SETNX);
/// - release: `DEL name` only while the holder's own expiration is in the
///   future (a check and a delete, not atomic: the algorithm's own flaw).
/// Known flaws kept on purpose: every client's wall clock must agree, and a
/// loser's GETSET still overwrites the winner's expiration. There is no
/// owner token, so it cannot be renewed and a lost acquire reply stays
/// outcome_unknown.
struct GetSetExpiry : expiry_value {
  static constexpr const char* policy_name = "getset";  ///< its part of a combination's name ("getset/fixed/spin")

  /// Test seam: runs on the backend's I/O thread after GET found the lock
  /// expired and before GETSET. A test holds two clients here to force the
  /// steal race.
  std::function<void()> between_get_and_getset;

  /// One try, as the class comment lists: won (by SETNX, or by a GETSET that
  /// read back a past time), the expiration written becomes `rec.owner` and
  /// the lease counts from that command's send. Lost to an unexpired holder:
  /// held_for is its time left by this client's clock; lost a steal: unknown.
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend,
                                                              ext::hold_record& rec) const {
    auto sent = ext::steady::now();
    std::string expiration = expiration_for(rec);
    auto [ec, v] = co_await ext::command(backend, rec.name, redis::request().push("SETNX", rec.name, expiration));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    auto won = ext::integer_of(v);
    if (won == 1) co_return acquired(rec, std::move(expiration), sent);
    if (won != 0) co_return std::pair{error_code(error::unexpected_reply), attempt{}};

    auto [gec, current] = co_await ext::command(backend, rec.name, redis::request().push("GET", rec.name));
    ext::note(rec, gec, current);
    if (gec) co_return std::pair{gec, attempt{}};
    if (!is_time_or_nil(current)) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    if (current.is_null()) co_return std::pair{error_code{}, attempt{false, milliseconds(0)}};  // just freed
    double old_expiration = parse(current.str);
    if (old_expiration >= wall_clock()) co_return std::pair{error_code{}, attempt{false, time_left(old_expiration)}};
    if (between_get_and_getset) between_get_and_getset();
    sent = ext::steady::now();
    expiration = expiration_for(rec);
    auto [sec, previous] = co_await ext::command(backend, rec.name, redis::request().push("GETSET", rec.name, expiration));
    ext::note(rec, sec, previous);
    if (sec) co_return std::pair{sec, attempt{}};
    if (!is_time_or_nil(previous)) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    if (previous.is_null() || parse(previous.str) < wall_clock())
      co_return acquired(rec, std::move(expiration), sent);
    co_return std::pair{error_code{}, attempt{false, std::nullopt}};
  }

  /// lease_lost without a command once its own expiration has passed (by
  /// this client's clock); else `DEL name`: released (1) or lease_lost (0).
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend,
                                                                  ext::hold_record& rec) const {
    if (parse(rec.owner) <= wall_clock())  // our time is up: the key may be someone else's
      co_return std::pair{error_code{}, release_outcome::lease_lost};
    auto [ec, v] = co_await ext::command(backend, rec.name, redis::request().push("DEL", rec.name));
    ext::note(rec, ec, v);
    co_return ext::deleted(ec, v);
  }

 private:
  // GET and GETSET answer the stored time (a bulk string) or nil.
  static bool is_time_or_nil(const redis::value& v) { return v.is_null() || v.type == redis::kind::bulk_string; }

  static std::pair<error_code, attempt> acquired(ext::hold_record& rec, std::string expiration,
                                                 ext::steady::time_point sent) {
    rec.owner = std::move(expiration);
    rec.confirm(sent);
    return {error_code{}, attempt{true, std::nullopt}};
  }
};

}  // namespace dlock::ownership
