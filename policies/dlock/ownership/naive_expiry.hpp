// ownership::NaiveExpiry: seed 002's expiry lock before GETSET (A3n): the
// value is an expiration time, and a waiter that finds it past deletes the
// key and tries SETNX again. Kept to show the race that GETSET stops.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <dlock/ext.hpp>
#include <dlock/ownership/expiry_value.hpp>

namespace dlock::ownership {

/// The value is the lock's expiration time in epoch seconds, as with
/// GetSetExpiry (the same layout and base, expiry_value, so the two exclude
/// each other on a name):
/// - acquire: `SETNX name expiration`; if the key exists, `GET name`, and if
///   the time it holds has passed, `DEL name` and `SETNX name expiration`
///   again;
/// - release: `DEL name`, whoever holds it by then.
///
/// Known failure, kept on purpose: two waiters B and C both read the same
/// expired time; C deletes it and wins its SETNX; then B's DEL deletes C's
/// fresh lock and B's SETNX wins too. Both hold the lock. GetSetExpiry's
/// GETSET exists to stop exactly this. Like GetSetExpiry it trusts every
/// client's wall clock, has no owner token (no watchdog, no owner-checked
/// release), and a lost acquire reply stays outcome_unknown.
///
/// This header is also the worked example of docs/writing-a-policy.md:
/// it is the whole policy, and one entry in combinations.hpp's list adds it
/// to every place where combinations are listed.
struct NaiveExpiry : expiry_value {
  static constexpr const char* policy_name = "naive";  ///< its part of a combination's name ("naive/fixed/spin")

  /// Test seam: runs on the backend's I/O thread after GET found the lock
  /// expired and before DEL. A test holds two clients here to force the
  /// double-DEL race.
  std::function<void()> between_get_and_del;

  /// One try, as the class comment lists: won, the expiration written
  /// becomes `rec.owner` and the lease counts from the SETNX's send. Lost to
  /// an unexpired holder: held_for is its time left by this client's clock.
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend, ext::hold_record& rec) const {
    auto [ec, won] = co_await set_if_absent(backend, rec);
    if (ec || won.acquired) co_return std::pair{ec, won};

    auto [gec, current] = co_await ext::command(backend, rec.name, redis::request().push("GET", rec.name));
    ext::note(rec, gec, current);
    if (gec) co_return std::pair{gec, attempt{}};
    if (current.is_null()) co_return std::pair{error_code{}, attempt{false, milliseconds(0)}};  // just freed
    if (current.type != redis::kind::bulk_string) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    double expires_at = parse(current.str);
    if (expires_at >= wall_clock()) co_return std::pair{error_code{}, attempt{false, time_left(expires_at)}};
    // Expired: delete it and race for it again. Not atomic with the GET:
    // another waiter may have done the same in between (the known failure).
    if (between_get_and_del) between_get_and_del();
    auto [dec, deleted] = co_await ext::command(backend, rec.name, redis::request().push("DEL", rec.name));
    ext::note(rec, dec, deleted);
    if (dec) co_return std::pair{dec, attempt{}};
    if (!ext::integer_of(deleted)) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    co_return co_await set_if_absent(backend, rec);
  }

  /// `DEL name`, whoever holds it by then: released (1) or lease_lost (0: gone).
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, ext::hold_record& rec) const {
    auto [ec, v] = co_await ext::command(backend, rec.name, redis::request().push("DEL", rec.name));
    ext::note(rec, ec, v);
    co_return ext::deleted(ec, v);
  }

 private:
  // SETNX with a fresh expiration time; on a win the time becomes the
  // hold's owner value and its lease counts from the send.
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> set_if_absent(B& backend, ext::hold_record& rec) const {
    auto sent = ext::steady::now();
    auto expiration = expiration_for(rec);
    auto [ec, v] = co_await ext::command(backend, rec.name, redis::request().push("SETNX", rec.name, expiration));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    auto won = ext::integer_of(v);
    if (won == 0) co_return std::pair{error_code{}, attempt{false, std::nullopt}};
    if (won != 1) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    rec.owner = std::move(expiration);
    rec.confirm(sent);
    co_return std::pair{error_code{}, attempt{true, std::nullopt}};
  }
};

}  // namespace dlock::ownership
