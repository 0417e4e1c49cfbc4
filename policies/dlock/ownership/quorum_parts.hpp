// The parts of ownership::Quorum: each node's share of a hold (its
// record, its state, its operations taking turns) and how the nodes'
// renewal verdicts are counted.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <dlock/ext.hpp>

namespace dlock::ownership {

namespace quorum_parts {

/// O's own per-hold state (its hold_state), or nothing.
template <class O>
struct state_of {
  struct type {};  ///< nothing: O has no state of its own
};
/// O's own per-hold state: its hold_state.
template <class O>
  requires requires { typename O::hold_state; }
struct state_of<O> {
  using type = typename O::hold_state;  ///< O's hold_state
};

/// One node's part of a hold: O's state on that node, kept between
/// operations, which take turns on it. Each operation runs on a record of
/// its own (an operation that outlives its deadline never shares a record
/// with a later one), made from the hold's when it is asked for, and given
/// the node's state when its turn comes: after the one before it ended,
/// late or not, as the node's connection runs them in order anyway. So a
/// release retried while the first attempt still waits for a stalled node
/// reads what that attempt left.
template <class O>
class node_slot {
 public:
  /// A record for one operation on this node: the hold's shared part (its
  /// state comes with the operation's turn).
  std::shared_ptr<ext::record_of<O>> record_for(const ext::hold_record& from) const {
    auto to = std::make_shared<ext::record_of<O>>();
    to->name = from.name;
    to->owner = from.owner;
    to->lease = from.lease;
    to->margin = from.margin;
    to->release_id = from.release_id;
    to->release_retry = from.release_retry;
    to->attempt_id = from.attempt_id;
    // Trusted as long as the hold is (Token's release asks whether it
    // left in time).
    if (from.lost()) to->mark_lost();
    else if (auto until = from.valid_until(); until != ext::steady::time_point::max() && from.lease > milliseconds::zero())
      to->confirm(until - from.lease);
    return to;
  }
  /// The node's operations take turns here.
  ext::turns& turns() noexcept { return turns_; }
  /// This node's state, into the record of the operation whose turn it is.
  void load(ext::record_of<O>& rec) const {
    if constexpr (has_state) rec.state = state_;
  }
  /// What an operation left in its record's state, for the next one.
  void keep(const ext::record_of<O>& rec) {
    if constexpr (has_state) state_ = rec.state;
  }

  /// What this node knows of try `attempt`: won (and not given back),
  /// not won (it did not run, lost, or was given back), or nullopt when
  /// unknown. Read and written in turn only.
  std::optional<bool> verdict(const std::string& attempt) const {
    std::lock_guard g(m_);
    if (attempt != attempt_) return std::nullopt;
    return verdict_;
  }
  /// What this node now knows of try `attempt` (see verdict()), and the
  /// fencing token its win took there, if any.
  void set_verdict(const std::string& attempt, std::optional<bool> v, std::optional<std::uint64_t> fence = {}) {
    std::lock_guard g(m_);
    attempt_ = attempt;
    verdict_ = v;
    fence_ = fence;
  }
  /// The fencing token try `attempt` took on this node (with fencing on).
  std::optional<std::uint64_t> fence(const std::string& attempt) const {
    std::lock_guard g(m_);
    return attempt == attempt_ && verdict_ == std::optional<bool>(true) ? fence_ : std::nullopt;
  }

 private:
  static constexpr bool has_state = requires { typename O::hold_state; };
  ext::turns turns_;
  [[no_unique_address]] typename state_of<O>::type state_{};  // read and written in turn only
  mutable std::mutex m_;  // the verdict is read outside the turns too (after a vote)
  std::string attempt_;
  std::optional<bool> verdict_;
  std::optional<std::uint64_t> fence_;
};

/// Each node's part of a hold (made at its first operation), and when its
/// first try was sent.
template <class O>
struct state {
  /// Mutable: made on first use by any operation, resolve's too (which
  /// takes the record const); an owner's operations take turns.
  mutable std::vector<std::shared_ptr<node_slot<O>>> nodes;
  /// When this hold's first try was sent: a key an earlier try of the same
  /// acquire left on a node (a give-back that did not reach it) expires
  /// from then, so a win found by resolve counts its lease from here.
  ext::steady::time_point first_sent{};
};

// Each node's operation, in its turn, on a record of its own.
/// O's try on one node; the node remembers its verdict.
template <class O, class N>
asio::awaitable<std::pair<error_code, attempt>> node_try(std::shared_ptr<const O> o, N* node,
                                                         std::shared_ptr<node_slot<O>> slot,
                                                         std::shared_ptr<ext::record_of<O>> rec) {
  co_await slot->turns().enter();
  ext::turn_pass pass(slot->turns());
  slot->load(*rec);
  auto out = co_await o->try_acquire(*node, *rec);
  slot->keep(*rec);
  std::optional<bool> v;
  if (!out.first) v = out.second.acquired;
  else if (!ext::may_have_run(out.first)) v = false;  // it did not run
  slot->set_verdict(rec->attempt_id, v, rec->fence);
  co_return out;
}
/// O's release on one node. As a give-back (`give_back`) of try
/// `rec->attempt_id`: nothing is sent where that try is known not to have
/// won (a reentrant count must not drop for a re-entry that never ran), and
/// a give-back answered makes it "not won".
template <class O, class N>
asio::awaitable<std::pair<error_code, release_outcome>> node_release(std::shared_ptr<const O> o, N* node,
                                                                     std::shared_ptr<node_slot<O>> slot,
                                                                     std::shared_ptr<ext::record_of<O>> rec,
                                                                     bool give_back) {
  co_await slot->turns().enter();
  ext::turn_pass pass(slot->turns());
  if (give_back && slot->verdict(rec->attempt_id) == std::optional<bool>(false))
    co_return std::pair{error_code{}, release_outcome::released};
  slot->load(*rec);
  auto out = co_await o->release(*node, *rec);
  slot->keep(*rec);
  if (give_back && !out.first) slot->set_verdict(rec->attempt_id, false);
  co_return out;
}
/// Raises this node's fencing counter `key` to at least `token` (keeping
/// it `idle` ms), in its turn: whether the node confirmed it.
template <class O, class N>
asio::awaitable<std::pair<error_code, bool>> node_raise(N* node, std::shared_ptr<node_slot<O>> slot, std::string key,
                                                        std::string token, std::string idle) {
  static const redis::script raise(R"lua(
local now = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if now < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return 1
)lua");
  co_await slot->turns().enter();
  ext::turn_pass pass(slot->turns());
  std::vector<std::string> keys{std::move(key)};
  std::vector<std::string> args{std::move(token), std::move(idle)};
  auto [ec, v] = co_await ext::eval(*node, raise, std::move(keys), std::move(args));
  co_return std::pair{ec, !ec && ext::integer_of(v) == 1};
}

/// Whether try `rec->attempt_id` holds this node: what the node knows, else
/// O's resolve (a marker read after a give-back could say "won").
template <class O, class N>
asio::awaitable<std::pair<error_code, bool>> node_resolve(std::shared_ptr<const O> o, N* node,
                                                          std::shared_ptr<node_slot<O>> slot,
                                                          std::shared_ptr<ext::record_of<O>> rec) {
  co_await slot->turns().enter();
  ext::turn_pass pass(slot->turns());
  if (auto known = slot->verdict(rec->attempt_id)) co_return std::pair{error_code{}, *known};
  slot->load(*rec);
  auto out = co_await o->resolve(*node, *rec);
  slot->keep(*rec);
  if (!out.first) slot->set_verdict(rec->attempt_id, out.second);
  co_return out;
}
/// Waits until every node's connection is up, or `deadline` (polled every
/// 5 ms; a cancellation ends the wait). A reply lost with its connection
/// leaves the nodes reconnecting just when resolve would ask them, a node
/// that is down is not asked, and any node may hold part of the win (a
/// majority that came back first may miss it).
template <class B>
asio::awaitable<void> all_up(B& backend, ext::steady::time_point deadline) {
  const std::size_t n = backend.node_count();
  for (;;) {
    std::size_t up = 0;
    for (std::size_t i = 0; i < n; ++i) up += backend.node_available(i) ? 1 : 0;
    const auto now = ext::steady::now();
    if (up == n || now >= deadline) co_return;
    if (co_await ext::sleep_until(std::min(deadline, now + milliseconds(5)))) co_return;
  }
}

/// A node known to be down is not asked: its vote is lost at once.
template <class T>
asio::awaitable<std::pair<error_code, T>> not_asked() {
  co_return std::pair<error_code, T>{make_error_code(error::not_connected), T{}};
}

/// Why node `name` gave no usable answer, for an error's words.
template <class T>
std::string why_silent(const std::string& name, const std::optional<std::pair<error_code, T>>& r,
                       milliseconds waited) {
  if (!r) return name + " (no reply within " + std::to_string(waited.count()) + " ms)";
  return name + " (" + r->first.message() + ")";
}

/// Several holds' renewals on every node (O's batch of extend calls, read
/// by O's batch reader on each node's reply); only when O batches.
template <class O, bool = contract::ownership_extend_batch<O>>
struct batching {};
/// Several holds' renewals on every node: O's batch of extend calls, each
/// node's reply read by O's batch reader.
template <class O>
struct batching<O, true> {
  /// O's merged call, run on every node.
  static script_call extend_batch(const std::vector<const script_call*>& calls) { return O::extend_batch(calls); }
  /// One verdict per hold from every node's reply to the merged call (an
  /// array, one element per node), counted as read_extend counts one.
  static std::vector<renewal_verdict> read_extend_batch(const redis::value& v, std::size_t n);
};

/// One hold's verdict from its nodes' verdicts: renewed on a majority;
/// gone once a majority can no longer say renewed; else no verdict.
inline renewal_verdict count_verdicts(const std::vector<renewal_verdict>& each) {
  const std::size_t need = ext::majority_of(each.size());
  std::size_t renewed = 0, gone = 0;
  for (auto v : each) {
    if (v == renewal_verdict::renewed) ++renewed;
    else if (v == renewal_verdict::gone) ++gone;
  }
  if (each.empty()) return renewal_verdict::no_verdict;
  if (renewed >= need) return renewal_verdict::renewed;
  if (gone > each.size() - need) return renewal_verdict::gone;
  return renewal_verdict::no_verdict;
}

template <class O>
std::vector<renewal_verdict> batching<O, true>::read_extend_batch(const redis::value& v, std::size_t n) {
  std::vector<renewal_verdict> out(n, renewal_verdict::no_verdict);
  if (v.type != redis::kind::array || v.elements.empty()) return out;
  const auto read = ext::extend_batching<O>().read;
  std::vector<std::vector<renewal_verdict>> by_node;
  for (const auto& node : v.elements) by_node.push_back(read(node, n));
  std::vector<renewal_verdict> each(by_node.size());
  for (std::size_t h = 0; h < n; ++h) {
    for (std::size_t i = 0; i < by_node.size(); ++i) each[i] = h < by_node[i].size() ? by_node[i][h] : renewal_verdict::no_verdict;
    out[h] = count_verdicts(each);
  }
  return out;
}

}  // namespace quorum_parts

}  // namespace dlock::ownership
