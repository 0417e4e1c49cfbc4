// ownership::SetNx: the first attempt of the source articles (A1): SETNX to
// acquire, DEL to release; with a lease, a separate EXPIRE (A1b).
#pragma once

#include <functional>
#include <string>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// Bare `SETNX name value` + `DEL name`. Kept for teaching: nothing ties the
/// key to its owner, so anyone's DEL releases anyone's lock, and
/// - with renewal::None the key never expires: a crashed holder holds the
///   lock forever (A1);
/// - with renewal::FixedLease the expiry is a second command, `PEXPIRE`,
///   sent after SETNX succeeded: a crash between the two leaves a key with
///   no expiry (A1b).
/// An acquire whose reply was lost stays outcome_unknown: the value is not
/// unique enough to ask Redis "is it mine?".
struct SetNx {
  static constexpr const char* policy_name = "setnx";  ///< its part of a combination's name ("setnx/fixed/spin")
  static constexpr bool owner_checked = false;  ///< DEL releases whoever holds it; nothing can be extended safely
  static constexpr bool publishes_on_release = false;  ///< the release publishes nothing
  static constexpr bool reentrant = false;  ///< a second acquire by the same owner fails with already_held
  static constexpr bool needs_lease = false;  ///< works without expiry (renewal::None: A1, kept until DEL)

  /// Test seam: runs on the backend's I/O thread after SETNX succeeded and
  /// before PEXPIRE is sent. A test makes the process exit here to show the
  /// A1b crash window.
  std::function<void()> between_setnx_and_expire;

  /// Nothing to check: always no error.
  std::error_code validate() const { return {}; }

  /// Its release publishes nothing (no wait::PubSub with it).
  static std::string channel(std::string_view) { return {}; }

  /// A lost acquire reply cannot be resolved: the value does not tell this
  /// try from another client's, so it stays outcome_unknown.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B&, const ext::hold_record&) const {
    return ext::cannot_resolve();
  }

  /// The key's value, "<client id>:<owner id>": written, never compared.
  std::string make_owner(const std::string& client_id, const std::string& owner_id) const {
    return client_id + ":" + owner_id;
  }

  /// One try: `SETNX name owner`; won with a lease, then `PEXPIRE name
  /// lease`, whose lease counts from its send. A PEXPIRE that finds the key
  /// gone is a lost try; one that fails gets a `DEL` and its error is returned.
  /// Lost: held_for is unknown (nullopt).
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend,
                                                              ext::hold_record& rec) const {
    auto [ec, v] = co_await ext::command(backend, rec.name, redis::request().push("SETNX", rec.name, rec.owner));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    auto won = ext::integer_of(v);
    if (won == 0) co_return std::pair{error_code{}, attempt{false, std::nullopt}};
    if (won != 1) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    if (rec.lease > milliseconds::zero()) {
      if (between_setnx_and_expire) between_setnx_and_expire();
      auto sent = ext::steady::now();
      auto [eec, ev] =
          co_await ext::command(backend, rec.name, redis::request().push("PEXPIRE", rec.name, rec.lease.count()));
      ext::note(rec, eec, ev);
      auto set = ext::integer_of(ev);
      // 0: the key vanished between the two commands (anyone's DEL frees
      // an A1 lock): not ours, try again.
      if (!eec && set == 0) co_return std::pair{error_code{}, attempt{false, milliseconds(0)}};
      if (!eec && set != 1) eec = error::unexpected_reply;
      if (eec) {
        // A key without its expiry would never free: give it back and
        // report the failure. If the DEL cannot get through either, this is
        // A1b's failure for real, and the caller still learns of it.
        co_await ext::command(backend, rec.name, redis::request().push("DEL", rec.name));
        co_return std::pair{eec, attempt{}};
      }
      rec.confirm(sent);
    }
    co_return std::pair{error_code{}, attempt{true, std::nullopt}};
  }

  /// `DEL name`, whoever holds it: released (1) or lease_lost (0: gone).
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend,
                                                                  ext::hold_record& rec) const {
    auto [ec, v] = co_await ext::command(backend, rec.name, redis::request().push("DEL", rec.name));
    ext::note(rec, ec, v);
    co_return ext::deleted(ec, v);
  }
};

}  // namespace dlock::ownership
