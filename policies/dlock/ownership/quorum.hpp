// ownership::Quorum<O>: ownership O on each node of a quorum backend
// (Redlock over independent masters), the nodes' replies counted into one
// verdict. A quorum backend names it as its `ownership_for<O>`; the host
// runs it in place of O, so users pick Redlock by the backend alone.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <dlock/ext.hpp>
#include <dlock/ownership/quorum_parts.hpp>

namespace dlock::ownership {


/// Ownership `O` on every node of a quorum backend (see ext::quorum_backend;
/// RedlockBackend is one), its nodes' verdicts counted:
/// - **acquire**: O's try goes to every node at once, each answer waited for
///   until `min(reply_timeout, lease - loss margin)` after the first send.
///   The hold is granted when a majority won and time is left of the lease
///   (Redlock's validity: lease - elapsed - drift, the drift being the
///   hold's loss margin, 1% + 5 ms by default; measured on the steady
///   clock). Otherwise what may have been won (wins, and tries not
///   answered) is given back on those nodes, and the try reports the lock
///   held (a split vote retries after a random pause of up to the reply
///   timeout, so that rivals do not split it for ever);
/// - a node that is down, refuses, or answers late is a lost vote. When
///   fewer than a majority answered at all, the try fails with
///   error::no_quorum, naming the nodes that did not (the lock's wait
///   votes again, for at most a lease: see Lock::acquire); when the give-back
///   could not confirm that a majority is free of this try, with
///   outcome_unknown (resolve() then asks every node, once they are
///   connected again, waiting up to the reply timeout);
/// - **release**: O's release on every node: released (or still held, for
///   a reentrant count) when a majority says so, lease_lost when a majority
///   found the hold gone, else outcome_unknown (a retry asks again, as O's
///   retries do);
/// - **renewal**: O's extend call, run by the backend on every node (its
///   reply one element per node), renewed when a majority renewed, gone
///   once a majority cannot any more.
/// Requires an owner-checked O (a partial win is given back by O's release)
/// and a lease (the rule table refuses the rest).
template <class O>
class Quorum : public quorum_parts::batching<O> {
 public:
  static constexpr const char* policy_name = O::policy_name;  ///< O's name: the backend says it is a quorum
  static constexpr bool owner_checked = O::owner_checked;  ///< as O
  static constexpr bool publishes_on_release = O::publishes_on_release;  ///< as O, on each node
  static constexpr bool reentrant = O::reentrant;  ///< as O, counted on each node
  static constexpr bool needs_lease = O::needs_lease;  ///< as O (a quorum needs one anyway: see the rule table)

  using hold_state = quorum_parts::state<O>;  ///< each node's record of the hold
  using record = ext::hold_record_with<hold_state>;  ///< the record its operations take

  /// Runs `inner` on each node.
  explicit Quorum(O inner = {}) : inner_(std::make_shared<const O>(std::move(inner))) {}

  /// The ownership run on each node.
  const O& inner() const noexcept { return *inner_; }

  /// O's validation.
  std::error_code validate() const { return inner_->validate(); }

  /// O's channel (published on each node).
  static std::string channel(std::string_view name) { return O::channel(name); }

  /// O's owner value, the same on every node.
  std::string make_owner(const std::string& client_id, const std::string& key) const {
    return inner_->make_owner(client_id, key);
  }

  /// One vote on every node (see the class comment).
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend, record& rec) const {
    const std::size_t n = backend.node_count(), need = ext::majority_of(n);
    const auto start = ext::steady::now();
    if (rec.state.first_sent == ext::steady::time_point{}) rec.state.first_sent = start;
    // Half of what the lease leaves at most: a vote that ran to its
    // deadline still leaves a hold half its validity.
    const auto waited =
        std::max(milliseconds(1), std::min<milliseconds>(backend.reply_timeout(), (rec.lease - rec.margin) / 2));
    auto got = co_await each<attempt>(backend, rec, start + waited, nullptr, [](auto o, auto* node, auto slot, auto r) {
      return quorum_parts::node_try(std::move(o), node, std::move(slot), std::move(r));
    });
    std::size_t won = 0, held = 0;
    std::vector<bool> maybe_ours(n, false);
    std::vector<milliseconds> held_for;
    std::string silent;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& r = got[i];
      if (r && !r->first && r->second.acquired) {
        ++won;
        maybe_ours[i] = true;
      } else if (r && !r->first) {
        ++held;
        if (r->second.held_for) held_for.push_back(std::max(*r->second.held_for, milliseconds(0)));
      } else {
        maybe_ours[i] = !r || ext::may_have_run(r->first);  // it may still run, or may have
        add(silent, quorum_parts::why_silent(backend.node_name(i), r, waited));
      }
    }
    // Redlock's validity: what is left of the lease after the vote, less
    // the drift (the hold's loss margin).
    if (won >= need && ext::steady::now() < start + rec.lease - rec.margin) {
      // With fencing, the hold's token is the highest the won nodes took,
      // raised on a majority before the hold counts (see fence_won).
      if (!fencing_on() || rec.fence || co_await fence_won(backend, rec, start + rec.lease - rec.margin)) {
        if (ext::steady::now() < start + rec.lease - rec.margin) {
          rec.confirm(start);
          co_return std::pair{error_code{}, attempt{true, std::nullopt}};
        }
      }
      rec.fence.reset();
    }
    // Not held: whatever may have been won is given back.
    std::size_t still = co_await give_back(backend, rec, maybe_ours, waited);
    if (still >= need) {
      rec.server_reply = ext::own_words("nodes that may hold this try's win could not confirm its give-back; "
                                        "no reply from: " + silent);
      co_return std::pair{error_code(error::outcome_unknown), attempt{}};
    }
    if (won + held < need) {
      rec.server_reply = ext::own_words(std::to_string(won + held) + " of " + std::to_string(n) +
                                        " nodes answered, a majority is " + std::to_string(need) +
                                        "; no answer from: " + silent);
      // held_for: the lock's wait (which retries, see Lock) votes again
      // after at most one reply timeout.
      co_return std::pair{error_code(error::no_quorum), attempt{false, backend.reply_timeout()}};
    }
    if (won > 0) co_await split_pause(ext::steady::now() - start);
    // The lock frees up once enough held nodes let go to leave a majority free.
    std::optional<milliseconds> wait_for = milliseconds(0);
    const std::size_t free_now = n - held;
    if (need > free_now) {
      std::sort(held_for.begin(), held_for.end());
      const std::size_t k = need - free_now;
      wait_for = k <= held_for.size() ? std::optional(held_for[k - 1]) : std::nullopt;
    }
    co_return std::pair{error_code{}, attempt{false, wait_for}};
  }

  /// O's release on every node, counted (see the class comment).
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, record& rec) const {
    const std::size_t n = backend.node_count(), need = ext::majority_of(n);
    const auto waited = backend.reply_timeout();
    auto got = co_await each<release_outcome>(backend, rec, ext::steady::now() + waited, nullptr,
                                              [](auto o, auto* node, auto slot, auto r) {
                                                return quorum_parts::node_release(std::move(o), node, std::move(slot),
                                                                                  std::move(r), false);
                                              });
    std::size_t ended = 0, kept = 0, gone = 0;
    std::string silent;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& r = got[i];
      if (!r || r->first) {
        add(silent, quorum_parts::why_silent(backend.node_name(i), r, waited));
        continue;
      }
      if (r->second == release_outcome::released) ++ended;
      else if (r->second == release_outcome::still_held) ++kept;
      else ++gone;
    }
    if (ended >= need) co_return std::pair{error_code{}, release_outcome::released};
    if (kept >= need) co_return std::pair{error_code{}, release_outcome::still_held};
    // No majority holds it any more, and some had lost it before: whether
    // the hold was still on a majority until now cannot be told.
    if (ended + gone >= need) co_return std::pair{error_code{}, release_outcome::lease_lost};
    rec.server_reply = ext::own_words("no majority could confirm the release (" + std::to_string(ended + kept) +
                                      " released, " + std::to_string(gone) + " found it gone); no answer from: " +
                                      (silent.empty() ? std::string("none") : silent));
    co_return std::pair{error_code(error::outcome_unknown), release_outcome::lease_lost};
  }

  /// After a try whose outcome was unknown: whether a majority holds this
  /// try's win (O's resolve on every node, once they are connected: it
  /// waits up to the reply timeout for connections that the lost replies
  /// broke); outcome_unknown while too few answered to tell.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B& backend, const record& rec) const {
    const std::size_t n = backend.node_count(), need = ext::majority_of(n);
    co_await quorum_parts::all_up(backend, ext::steady::now() + backend.reply_timeout());
    auto got = co_await each<bool>(backend, rec, ext::steady::now() + backend.reply_timeout(), nullptr,
                                   [](auto o, auto* node, auto slot, auto r) {
                                     return quorum_parts::node_resolve(std::move(o), node, std::move(slot), std::move(r));
                                   });
    std::size_t won = 0, unknown = 0;
    std::vector<bool> ours(n, false);
    for (std::size_t i = 0; i < n; ++i) {
      if (!got[i] || got[i]->first) ++unknown;
      else if (got[i]->second) ++won;
      ours[i] = !got[i] || got[i]->first || got[i]->second;
    }
    // With fencing on, a win found this way has no token (it cannot be
    // taken after the fact on a quorum, as one server's lock does): it is
    // given back, and the acquire tries again.
    if (won >= need && !fencing_on()) co_return std::pair{error_code{}, true};
    // Not held (or held without a token): what it may hold is given back.
    std::size_t still = 0;
    if (won > 0 || unknown > 0) still = co_await give_back(backend, rec, ours, backend.reply_timeout());
    if (won >= need) co_return std::pair{still >= need ? error_code(error::outcome_unknown) : error_code{}, false};
    if (won + unknown < need) co_return std::pair{error_code{}, false};
    co_return std::pair{error_code(error::outcome_unknown), false};
  }

  /// When the lease of a win found by resolve began, at the earliest: this
  /// hold's first try (a key an earlier try left on a node expires from
  /// then).
  static ext::steady::time_point earliest_start(const record& rec, ext::steady::time_point sent) {
    return rec.state.first_sent == ext::steady::time_point{} ? sent : std::min(sent, rec.state.first_sent);
  }

  /// O's extend call; the backend runs it on every node.
  script_call extend_call(const ext::hold_record& rec) const { return inner_->extend_call(rec); }

  /// A renewal's reply, one element per node, each read by O's reader:
  /// renewed on a majority, gone once a majority cannot say renewed.
  static renewal_verdict read_extend(const redis::value& v) {
    if (v.type != redis::kind::array) return renewal_verdict::no_verdict;
    const auto read = ext::extend_reader<O>();
    std::vector<renewal_verdict> each;
    for (const auto& node : v.elements) each.push_back(read(node));
    return quorum_parts::count_verdicts(each);
  }

 private:
  static void add(std::string& list, const std::string& item) {
    if (!list.empty()) list += ", ";
    list += item;
  }

  // `start(ownership, node, slot, record)`, an operation of O, on every
  // node at once (on those `only` marks, when given; a node that is down is
  // not asked), each on a record of its own, gathered until `deadline`.
  template <class T, class B, class Start>
  asio::awaitable<std::vector<std::optional<std::pair<error_code, T>>>> each(B& backend, const record& rec,
                                                                             ext::steady::time_point deadline,
                                                                             const std::vector<bool>* only,
                                                                             Start start) const {
    auto& nodes = rec.state.nodes;
    while (nodes.size() < backend.node_count()) nodes.push_back(std::make_shared<quorum_parts::node_slot<O>>());
    const auto ex = backend.get_executor();  // named: see give_back
    co_return co_await ext::on_each_node<std::pair<error_code, T>>(
        ex, backend.node_count(), deadline, [&](std::size_t i) {
          if ((only && !(*only)[i]) || !backend.node_available(i)) return quorum_parts::not_asked<T>();
          return start(inner_, &backend.node(i), nodes[i], nodes[i]->record_for(rec));
        });
  }

  // Releases this try on the nodes marked in `maybe_ours`, waiting for
  // their answers at most `waited`; how many of them could not confirm
  // that this try holds nothing there now.
  template <class B>
  asio::awaitable<std::size_t> give_back(B& backend, const record& rec, std::vector<bool>& maybe_ours,
                                         milliseconds waited) const {
    std::size_t left = std::count(maybe_ours.begin(), maybe_ours.end(), true);
    if (left == 0) co_return 0;
    // Named, not a temporary in the co_await: g++ 12 destroys a temporary
    // with a non-trivial destructor there twice.
    auto start = [id = ext::unique_id()](auto o, auto* node, auto slot, auto r) {
      r->release_id = id;  // a release of its own, not a retry
      r->release_retry = false;
      return quorum_parts::node_release(std::move(o), node, std::move(slot), std::move(r), true);
    };
    auto got = co_await each<release_outcome>(backend, rec, ext::steady::now() + waited, &maybe_ours, start);
    for (std::size_t i = 0; i < maybe_ours.size(); ++i) {
      if (maybe_ours[i] && got[i] && !got[i]->first) {
        maybe_ours[i] = false;
        --left;
      }
    }
    co_return left;
  }

  // Whether O hands out fencing tokens (its `fencing` is set).
  bool fencing_on() const {
    if constexpr (requires { inner_->fencing.has_value(); }) return inner_->fencing.has_value();
    else return false;
  }

  // A win's fencing token: the highest the won nodes' own counters gave
  // (each raised its counter in the try's script), written back to every
  // node's counter, which a majority must confirm by `until`. Then any
  // later win's majority shares a node with this one whose counter is at
  // least the token, and takes a higher one. Sets rec.fence; false when no
  // token can be trusted (the win is then given back by the caller's path).
  template <class B>
  asio::awaitable<bool> fence_won(B& backend, record& rec, ext::steady::time_point until) const {
    std::uint64_t top = 0;
    for (auto& node : rec.state.nodes)
      if (auto f = node->fence(rec.attempt_id)) top = std::max(top, *f);
    if (top == 0) co_return false;
    const auto key = ext::fence_key(rec.name);
    const auto token = std::to_string(top);
    std::string idle;
    if constexpr (requires { inner_->fencing.has_value(); }) idle = ext::fence_arg(inner_->fencing);
    // Named, not a temporary in the co_await: see give_back.
    auto start = [&](auto, auto* node, auto slot, auto) {
      return quorum_parts::node_raise<O>(node, std::move(slot), key, token, idle);
    };
    auto got = co_await each<bool>(backend, rec, std::min(until, ext::steady::now() + backend.reply_timeout()), nullptr,
                                   start);
    std::size_t raised = 0;
    for (const auto& r : got) raised += r && !r->first && r->second;
    if (raised < ext::majority_of(backend.node_count())) co_return false;
    rec.fence = top;
    co_return true;
  }

  // After a split vote: a random pause of up to the time the vote took
  // (rivals whose tries overlapped in time split it; a pause as long as a
  // vote sets them apart).
  static asio::awaitable<void> split_pause(ext::steady::duration took) {
    thread_local std::minstd_rand rng{std::random_device{}()};
    const auto most = std::max<long long>(1, std::chrono::duration_cast<milliseconds>(took).count());
    std::uniform_int_distribution<long long> pick(0, most);
    co_await ext::sleep_until(ext::steady::now() + milliseconds(pick(rng)));
  }

  std::shared_ptr<const O> inner_;
};

}  // namespace dlock::ownership
