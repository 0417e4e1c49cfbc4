// ownership::ReadWrite: Redisson's RReadWriteLock (many readers or one
// writer, both reentrant), with a waiting writer's intent that keeps new
// readers out so that a stream of readers cannot starve it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dlock/ext.hpp>
#include <dlock/ownership/read_write_scripts.hpp>

namespace dlock::ownership {

/// A read-write lock: any number of shared holds (readers) or one
/// exclusive hold (a writer). With it, Lock gains the shared interface
/// (lock_shared, try_lock_shared_for, unlock_shared, acquire_shared,
/// async_acquire_shared...), so std::shared_lock works; lock() and the
/// other calls take it exclusively.
///
/// Wire-compatible with Redisson's RReadWriteLock: a hash at `name` whose
/// field `mode` is "read" or "write"; a reader's field `<client id>:<owner>`
/// and the writer's `<client id>:<owner>:write` hold reentrant counts; each
/// read acquisition also has a key of its own with its lease,
/// `{name}:<reader field>:rwlock_timeout:<n>`, so that a reader that died
/// stops counting when its lease ends although its field stays in the
/// hash. The hash lives as long as its longest lease. Releases publish on
/// `redisson_rwlock:{name}`: "1" (wake every waiter: readers may all enter)
/// when a writer lets go, "0" when the last reader does (or "1" when a
/// writer's intent is there, so that the writer is among those woken; a
/// Redisson reader's last release says "0" all the same, and then the
/// writer may be woken only by its own timer).
///
/// Writer intent (dlock's addition, invisible to Redisson's clients): a
/// writer whose try fails while it means to wait leaves its field at
/// `{name}:write_intent` (in the lock's slot, as ext::same_slot_key names
/// it; for the holder's time left and one lease more, renewed by each of
/// its tries); while it is there, no new reader enters, only readers that
/// already hold the lock re-enter (they would otherwise wait for the
/// writer that waits for them). A refused reader sleeps no longer than the
/// intent lives. The writer that wins takes its intent away, and so does
/// one that gives up (see withdraw). A writer that dies waiting keeps new
/// readers out until its intent expires. Redisson's readers do not know of
/// it and still enter.
///
/// A reader whose newest lease key has expired (a pause past its lease, a
/// crash) has lapsed, although its field may stay while other readers keep
/// the hash alive: the next try that meets its field drops it, so that it
/// passes neither for a re-entry nor for an upgrade. A re-entered read
/// gives all of its owner's lease keys the new lease (the hold is trusted
/// for the newest). Redisson's watchdog (its 30 s renewal) sets the hash's
/// expiry to exactly its lease; dlock never shortens it below a live
/// dlock reader's key, but a Redisson reader that dies can leave the hash
/// shorter than a dlock reader's longer lease (the dlock reader's renewal
/// puts it back).
///
/// Reentrancy as Redisson's: an owner may take the lock shared again, or
/// exclusively again, and a writer may also take it shared (a downgrade:
/// when its exclusive hold ends, the lock stays shared, and the waiters
/// are woken). An upgrade, an owner that holds the lock shared asking for
/// it exclusively, is refused with already_held: it would wait for itself.
///
/// A lost acquire reply is resolved from a marker key that a winning try
/// leaves (`{name}:acquire:<attempt id>`, release_memory.window); a retried
/// release after outcome_unknown is answered from the first attempt's
/// marker, as ReentrantHash's. On one server, Sentinel or a cluster (its
/// keys share the lock's slot); a quorum backend refuses it (readers are
/// several holders at once).
///
/// Fencing tokens (set `fencing`): readers and writers take them from one
/// counter, so a write's token is higher than that of every hold granted
/// before it, read or write. A resource refuses a write whose token is
/// below the highest token it has seen of any hold, and a read whose token
/// is below the highest it has seen on a write (readers do not exclude each
/// other, so reads do not fence reads). A writer's own read (a downgrade)
/// carries its write's token (any read it takes while it writes, through
/// any lock object), and a write refreshes the counter's idle time when it
/// re-enters or reads, so that the counter outlives a long write. A
/// re-entry through the same lock object keeps the token of the first;
/// through another object of the same owner, a write's re-entry gets its
/// first's too, a read's (the owner not writing) a fresh one.
struct ReadWrite : ReadWriteScripts {
  static constexpr const char* policy_name = "rw";  ///< its part of a combination's name ("rw/watchdog/pubsub")
  static constexpr bool owner_checked = true;  ///< release and extend act only on this owner's field
  static constexpr bool publishes_on_release = true;  ///< releases publish on channel(name)
  static constexpr bool reentrant = true;  ///< the same owner may take it again, shared or exclusively
  static constexpr bool needs_lease = true;  ///< a hash without expiry would be held forever by a dead holder
  static constexpr bool admits_many = true;  ///< readers: several holds at once (a quorum refuses it)
  static constexpr bool shares = true;  ///< Lock gains lock_shared() and the rest of the shared interface

  /// What each hold's record keeps: whether a writer's failed try left its
  /// intent (so that giving up takes it away).
  struct hold_state {
    bool intent = false;  ///< this writer's field may be at the intent key
  };
  using record = ext::hold_record_with<hold_state>;  ///< the record its operations take

  /// How long markers of wins and releases live (10 s).
  ext::release_memory release_memory;

  /// Whether a waiting writer leaves its intent (true). False is
  /// Redisson's lock as it is: readers enter whenever the lock is shared,
  /// and a stream of them can keep a writer out for ever (see the tour's
  /// writer_starvation).
  bool writer_intent = true;

  /// Fencing tokens (see dlock::fencing_tokens and above); empty: off.
  std::optional<fencing_tokens> fencing;

  /// The fencing setting's error, if any; else the release memory's.
  std::error_code validate() const {
    if (fencing)
      if (auto ec = fencing->validate()) return ec;
    return release_memory.validate();
  }

  /// Redisson's prefix for the lock's companion keys: `{name}`, or the name
  /// itself when it holds a '{'.
  static std::string key_prefix(std::string_view name) {
    if (name.find('{') != std::string_view::npos) return std::string(name);
    return "{" + std::string(name) + "}";
  }

  /// Redisson's channel: `redisson_rwlock:` and the key prefix.
  static std::string channel(std::string_view name) { return "redisson_rwlock:" + key_prefix(name); }

  /// Where a waiting writer leaves its intent (in the lock's cluster slot).
  static std::string intent_key(std::string_view name) { return ext::same_slot_key(name, "write_intent"); }

  /// What readers' timeout keys start with: Redisson's key_prefix, unless
  /// that would put them in another cluster slot than the lock (a name with
  /// a '}' that closes no hash tag, "x}y", which Redisson's own keys get
  /// wrong): then dlock's companion naming (ext::same_slot_key).
  static std::string timeout_base(std::string_view name) {
    auto redisson = key_prefix(name);
    if (ext::key_slot(redisson + ":x") == ext::key_slot(name)) return redisson;
    auto own = ext::same_slot_key(name, "x");
    return own.substr(0, own.size() - 2);
  }

  /// A reader's timeout keys are this, ":" and the acquisition's number.
  static std::string timeout_prefix(std::string_view name, std::string_view reader_field) {
    return timeout_base(name) + ":" + std::string(reader_field) + ":rwlock_timeout";
  }

  /// The owner's field: "<client id>:<owner>" for a shared hold (owner keys
  /// of shared holds start with ext::shared_key_prefix, taken off here), and
  /// "<client id>:<owner>:write" for an exclusive one, as Redisson's.
  std::string make_owner(const std::string& client_id, const std::string& owner_key) const {
    std::string_view key = owner_key;
    if (key.starts_with(ext::shared_key_prefix)) return client_id + ":" + std::string(key.substr(ext::shared_key_prefix.size()));
    return client_id + ":" + owner_key + ":write";
  }

  /// The other field of the same owner: a reader's writer field, or a
  /// writer's reader field.
  static std::string other_field(const ext::hold_record& rec) {
    if (rec.shared) return rec.owner + ":write";
    return rec.owner.substr(0, rec.owner.size() - std::string_view(":write").size());
  }

  /// One try, shared or exclusive as the record says (rec.shared). Won: the
  /// lease counts from the send. Lost: held_for is the holder's time left.
  /// An exclusive try by an owner that holds the lock shared ends with
  /// already_held.
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend, record& rec) const {
    const auto sent = ext::steady::now();
    std::vector<std::string> keys{rec.name, ext::release_memory::acquire_key(rec), intent_key(rec.name),
                                  ext::fence_key(rec.name)};
    const bool intent = !rec.shared && rec.may_wait && writer_intent;
    std::vector<std::string> args{std::to_string(rec.lease.count()), rec.owner, other_field(rec), release_memory.ttl(),
                                  rec.shared ? timeout_prefix(rec.name, rec.owner) : (intent ? "1" : "0")};
    if (!rec.shared) args.push_back(timeout_prefix(rec.name, other_field(rec)));
    args.push_back(ext::fence_arg(fencing));
    // A try that may leave the intent counts as having left it until a win
    // takes it away: its reply may be lost (withdraw checks the owner).
    if (intent) rec.state.intent = true;
    const auto& script = rec.shared ? read_script() : write_script();
    auto [ec, v] = co_await ext::acknowledged_eval(backend, rec.acks, script, std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    const auto n = v.type == redis::kind::array ? v.elements.size() : 0;
    auto verdict = n >= 1 ? ext::integer_of(v.elements[0]) : std::nullopt;
    if (verdict == 1 && n <= 2) {
      // A first hold's token; a hold this record already has keeps its
      // own (a reader's re-entry has none in the reply); a reply that
      // should have one and has none is mended by the host's fence_call.
      if (n == 2 && !rec.fence) {
        rec.fence = ext::fence_of(v.elements[1]);
        if (!rec.fence) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
      }
      rec.state.intent = false;
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    if (verdict == -1 && n == 1 && !rec.shared) {
      rec.server_reply = ext::own_words("this owner holds the lock shared; an upgrade would wait for itself");
      co_return std::pair{error_code(error::already_held), attempt{}};
    }
    auto left = n >= 2 ? ext::integer_of(v.elements[1]) : std::nullopt;
    if (verdict != 0 || !left || n != (rec.shared ? 2u : 3u)) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    co_return std::pair{error_code{}, attempt{false, milliseconds(*left == -2 ? 0 : *left)}};
  }

  /// The shared or exclusive release: still_held, released, lease_lost (the
  /// lock was gone) or not_owner.
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, record& rec) const {
    std::vector<std::string> keys{rec.name, ext::release_memory::key(rec)};
    std::vector<std::string> args{rec.owner, ext::release_channel<ReadWrite>(backend, rec.name), release_memory.ttl(),
                                  ext::release_memory::retry_flag(rec)};
    const bool sharded = ext::sharded_pubsub(backend);
    if (rec.shared) {
      keys.push_back(intent_key(rec.name));
      args.push_back(timeout_prefix(rec.name, rec.owner));
      args.push_back(timeout_base(rec.name));
    } else {
      args.push_back(std::to_string(rec.lease.count()));
    }
    const auto& script = rec.shared ? read_release_script(sharded) : write_release_script(sharded);
    auto [ec, v] = co_await ext::eval(backend, script, std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    co_return ext::counted_release(ec, v);
  }

  /// The acquire ends without the lock: a writer that left its intent takes
  /// it away (withdraw_script). If that fails, the intent expires on its
  /// own (keeping new readers out until then): only time is lost.
  template <class B>
  asio::awaitable<error_code> withdraw(B& backend, record& rec) const {
    if (rec.shared || !rec.state.intent) co_return error_code{};
    std::vector<std::string> keys{rec.name, intent_key(rec.name)};
    std::vector<std::string> args{rec.owner, ext::release_channel<ReadWrite>(backend, rec.name)};
    auto [ec, v] = co_await ext::eval(backend, withdraw_script(ext::sharded_pubsub(backend)), std::move(keys),
                                      std::move(args));
    if (!ec && !ext::integer_of(v)) ec = error::unexpected_reply;
    if (!ec) rec.state.intent = false;
    co_return ec;
  }

  /// For a hold won without a fencing token in the reply (a lost reply
  /// found to have won): the owner-checked call that takes one.
  script_call fence_call(const ext::hold_record& rec) const {
    return {&fence_script(),
            {rec.name, ext::fence_key(rec.name)},
            {rec.owner, ext::fence_arg(fencing), rec.shared ? rec.owner + ":write" : rec.owner}};
  }

  /// Whether a try whose reply was lost won: its marker is there and the
  /// hash still has this owner's field.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B& backend, const ext::hold_record& rec) const {
    redis::request req;
    req.push("EXISTS", ext::release_memory::acquire_key(rec)).push("HEXISTS", rec.name, rec.owner);
    auto [ec, r] = co_await ext::exec(backend, rec.name, std::move(req));
    if (ec) co_return std::pair{ec, false};
    if (r.size() != 2) co_return std::pair{error_code(error::unexpected_reply), false};
    if (r[1].is_error()) co_return std::pair{error_code{}, false};  // not a hash: not ours
    auto marker = ext::integer_of(r[0]), field = ext::integer_of(r[1]);
    if (!marker || !field) co_return std::pair{error_code(error::unexpected_reply), false};
    co_return std::pair{error_code{}, *marker == 1 && *field == 1};
  }

  /// One hold's extend reply: the one-element array extend_script() gives.
  static renewal_verdict read_extend(const redis::value& v) {
    if (v.type != redis::kind::array || v.elements.size() != 1) return renewal_verdict::no_verdict;
    return ext::read_extend_reply(v.elements[0]);
  }

  /// The watchdog's renewal of this hold.
  script_call extend_call(const ext::hold_record& rec) const {
    return {&extend_script(),
            {rec.name},
            {std::to_string(rec.lease.count()), rec.owner, rec.shared ? timeout_prefix(rec.name, rec.owner) : ""}};
  }

  /// Several holds' extend_call()s as one call (the script takes any number).
  static script_call extend_batch(const std::vector<const script_call*>& calls) {
    return ext::merged_call(extend_script(), calls);
  }
};

}  // namespace dlock::ownership
