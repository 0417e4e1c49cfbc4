// ownership::Token: SET NX PX with a random owner token, released and
// extended by owner-checked Lua (A2); the layout of redis-py's Lock.
#pragma once

#include <string>

#include <dlock/concepts.hpp>
#include <dlock/detail/commands.hpp>
#include <dlock/detail/release_memory.hpp>
#include <dlock/detail/random.hpp>

namespace dlock::ownership {

/// `SET name token NX PX lease` to acquire; release and extend act only if
/// the key still holds this hold's token. The token is 128 bits from the OS
/// (getrandom), fresh for every acquisition. The key holds nothing but the
/// token, as with redis-py's `Lock` and node-redlock, so their locks and
/// this one exclude each other on the same name.
///
/// With renewal::None it is `SET name token NX`, no expiry: redis-py's
/// default `Lock(name)` (A2n). A crashed holder keeps it forever, but only
/// its owner's release deletes it.
///
/// Not reentrant: the same owner acquiring twice fails with already_held.
/// A lost acquire reply is resolved by asking whether the key holds our
/// token. A release retried after outcome_unknown is answered from a short
/// lived marker key, so the retry reports what the first attempt did.
struct Token {
  static constexpr const char* policy_name = "token";
  static constexpr bool owner_checked = true;
  static constexpr bool publishes_on_release = false;
  static constexpr bool reentrant = false;
  static constexpr bool needs_lease = false;

  /// How long a release remembers its result for a retry (10 s).
  detail::release_memory release_memory;

  std::error_code validate() const { return release_memory.validate(); }

  /// Its release publishes nothing (no wait::PubSub with it).
  static std::string channel(std::string_view) { return {}; }

  std::string make_owner(const std::string&, const std::string&) const {
    return detail::random_hex(16);
  }

  // KEYS[1] lock, KEYS[2] release marker; ARGV[1] token, ARGV[2] marker ttl.
  // Returns 1 released, 0 the key is not ours (lost).
  static const redis::script& release_script() {
    static const redis::script s(detail::release_memory::remembered(R"lua(
result = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  result = 1
end
)lua", 2, 2));
    return s;
  }

  // KEYS[1] lock; ARGV[1] token, ARGV[2] lease ms. 1 extended, 0 not ours.
  static const redis::script& extend_script() {
    static const redis::script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
)lua");
    return s;
  }

  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend,
                                                              detail::hold_record& rec) const {
    auto sent = detail::steady::now();
    redis::request req;
    if (rec.lease > milliseconds::zero()) req.push("SET", rec.name, rec.owner, "NX", "PX", rec.lease.count());
    else req.push("SET", rec.name, rec.owner, "NX");
    req.push("PTTL", rec.name);
    auto [ec, r] = co_await detail::exec(backend, std::move(req));
    if (ec) co_return std::pair{ec, attempt{}};
    if (r.size() != 2) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    if (r[0].is_error()) co_return std::pair{error_code(error::server_error), attempt{}};  // refused: not run
    if (r[0].type == redis::kind::simple_string && r[0].str == "OK") {
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    auto left = detail::integer_of(r[1]);
    // Anything but nil (held) with an integer PTTL is no verdict: it may have run.
    if (!r[0].is_null() || !left) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    co_return std::pair{error_code{}, attempt{false, milliseconds(*left == -2 ? 0 : *left)}};
  }

  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend,
                                                                  detail::hold_record& rec) const {
    std::vector<std::string> keys{rec.name, detail::release_memory::key(rec)};
    std::vector<std::string> args{rec.owner, release_memory.ttl()};
    auto [ec, v] = co_await detail::eval(backend, release_script(), std::move(keys), std::move(args));
    co_return detail::deleted(ec, v);  // 1 deleted, 0 not ours: as a DEL answers
  }

  /// After an acquire whose reply was lost: whether the key holds this
  /// try's token (the token is fresh per acquisition, so only our SET can
  /// have put it there).
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B& backend, const detail::hold_record& rec) const {
    auto [ec, v] = co_await detail::command(backend, redis::request().push("GET", rec.name));
    if (ec) co_return std::pair{ec, false};
    if (v.is_null()) co_return std::pair{error_code{}, false};
    if (v.type != redis::kind::bulk_string) co_return std::pair{error_code(error::unexpected_reply), false};
    co_return std::pair{error_code{}, v.str == rec.owner};
  }

  script_call extend_call(const detail::hold_record& rec) const {
    return {&extend_script(), {rec.name}, {rec.owner, std::to_string(rec.lease.count())}};
  }
};

}  // namespace dlock::ownership
