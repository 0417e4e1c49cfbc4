// Named wake-ups: a pub/sub waiter's number in its lock's line of waiters,
// which the release reads to wake one waiter across all clients, and how a
// waiter reads the release channel's messages.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include <dlock/detail/random.hpp>

namespace dlock::detail {

/// A pub/sub waiter's registration in its lock's line of named waiters: the
/// hold_state of an ownership whose release names the waiter it wakes
/// (ReentrantHash). The waiter (wait::PubSub) fills it in before each try;
/// the ownership's try script registers the number when the try fails.
struct named_waiter {
  /// What a failed try does with the number.
  enum class join_mode : unsigned char {
    none,    ///< nothing: this try does not wait, or waits unnamed
    join,    ///< registers it: it is surely not in the line
    rejoin,  ///< registers it unless it is there already (woken by a timer or an unnamed message); a win takes it out
  };
  /// The waiter's entry in the line: its number (decimal, see
  /// waiter_number), ":", and its backend's tag, which names the channel
  /// the release publishes the number on (see wake_groups); empty: none.
  std::string number;
  join_mode mode = join_mode::none;
  /// Set by a failed rejoin try: whether it appended the number (it was not
  /// in the line: a release had taken it, and that release's wake may still
  /// be on its way, naming a number that is in the line again).
  bool appended = false;
};

/// A waiter number, unique across clients with overwhelming probability: 62
/// random bits plus 2, as decimal. Redisson's waiters read every message on
/// the channel as a Java long and act on 0 (unlock) and 1 (read unlock)
/// only, so a number must parse as a long and be neither.
inline std::string waiter_number() {
  auto bits = std::stoull(random_hex(8), nullptr, 16);
  return std::to_string((bits >> 2) + 2);
}

/// What a message on a lock's release channel asks of its waiters.
enum class wake_kind {
  one_per_client,  ///< "0" (a release that names nobody, Redisson's unlock) or any other message: each client wakes one
  named,           ///< a waiter number: that waiter, wherever it is
  none,            ///< "00": Redisson's waiters' copy of a named wake
  everyone,        ///< "1" (Redisson's read-write unlock): every waiter of every client (readers may all enter)
};

/// Reads a release message: a waiter number (decimal, 2 or more, no
/// leading zero, at most 19 digits), "00", "1", or anything else (an
/// ownership that publishes its own message wakes one waiter per client,
/// as before named wake-ups).
inline wake_kind read_wake(std::string_view message) {
  if (message == "00") return wake_kind::none;
  if (message == "1") return wake_kind::everyone;
  if (message.empty() || message.size() > 19 || message.front() == '0')
    return wake_kind::one_per_client;
  for (char c : message)
    if (c < '0' || c > '9') return wake_kind::one_per_client;
  return wake_kind::named;
}

}  // namespace dlock::detail

namespace dlock::detail {

/// An ownership whose release names the waiter it wakes: its hold_state is
/// a named_waiter, and it has `forget_waiter(backend, record, owed)` for a
/// waiter that gives up (checked by the lock's policy checks).
template <class O>
concept names_waiters = requires { typename O::hold_state; } && std::same_as<typename O::hold_state, named_waiter>;

}  // namespace dlock::detail
