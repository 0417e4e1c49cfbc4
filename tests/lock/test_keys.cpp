// Companion keys (release and acquire markers) share their lock's cluster
// slot, for any name, checked against a real cluster's CLUSTER KEYSLOT.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include <dlock/detail/key_slot.hpp>
#include <dlock/dlock.hpp>
#include <support/redis_server.hpp>

namespace {

std::vector<std::string> awkward_names() {
  std::vector<std::string> names{"orders:42", "a{b}c", "{user1000}.following", "{}x", "a}b", "}{", "{", "}",
                                 "x{}y{z}", "{a}{b}", "a{b", "{{}}", "lock:coupon:7", "}}}", "{}"};
  std::mt19937 rng(20261123);  // fixed: the same names every run
  const std::string alphabet = "{}ab:";
  for (int i = 0; i < 200; ++i) {
    std::string name;
    for (int n = 1 + static_cast<int>(rng() % 8); n > 0; --n) name += alphabet[rng() % alphabet.size()];
    names.push_back(name);
  }
  return names;
}

}  // namespace

TEST_CASE("companion keys land in their lock's cluster slot, whatever braces the name holds", "[keys][cluster]") {
  dlock::test::redis_cluster cluster(3);
  auto& node = cluster.node(0);
  auto slot = [&](const std::string& key) { return std::stoi(node.command({"CLUSTER", "KEYSLOT", key})); };
  for (const auto& name : awkward_names()) {
    CAPTURE(name);
    auto lock_slot = slot(name);
    CHECK(dlock::detail::key_slot(name) == lock_slot);
    auto marker = dlock::detail::same_slot_key(name, "release:0123456789abcdef");
    CAPTURE(marker);
    CHECK(slot(marker) == lock_slot);
    CHECK(marker.size() > std::string(":release:0123456789abcdef").size());
  }
}

TEST_CASE("a name that can be its own tag stays readable in its markers", "[keys]") {
  using dlock::detail::same_slot_key;
  CHECK(same_slot_key("orders:42", "acquire:x") == "{orders:42}:acquire:x");
  CHECK(same_slot_key("a{b}c", "acquire:x") == "a{b}c:acquire:x");
  CHECK(same_slot_key("a{b", "acquire:x") == "{a{b}:acquire:x");
  // "a}b" cannot be a tag: a brace-free stand-in with the same slot.
  auto marker = same_slot_key("a}b", "acquire:x");
  CHECK(marker.find("{slot-") == 0);
  CHECK(dlock::detail::key_slot(marker) == dlock::detail::key_slot("a}b"));
}

TEST_CASE("a release channel on sharded pub/sub keeps its slot when a suffix is added", "[keys][pubsub]") {
  using dlock::detail::key_slot;
  // What a cluster backend with sharded pub/sub looks like to
  // release_channel: a sharded_pubsub() that says true.
  struct sharded {
    bool sharded_pubsub() const { return true; }
  };
  // A name starting with "}" leaves Redisson's channel
  // ("redisson_lock__channel:{}...}") without a hash tag: the whole channel
  // is hashed. Find one whose channel lands in the lock's slot all the same,
  // so that only the missing tag can send it elsewhere.
  std::string unlucky;
  for (int n = 0; n < 2000000 && unlucky.empty(); ++n) {
    auto name = "}" + std::to_string(n);
    if (key_slot(dlock::ownership::ReentrantHash::channel(name)) == key_slot(name)) unlucky = name;
  }
  REQUIRE_FALSE(unlucky.empty());
  auto names = awkward_names();
  names.push_back(unlucky);
  for (const auto& name : names) {
    CAPTURE(name);
    auto channel = dlock::ext::release_channel<dlock::ownership::ReentrantHash>(sharded{}, name);
    CAPTURE(channel);
    CHECK(key_slot(channel) == key_slot(name));
    // A waiting client's own channel and the presence channel.
    CHECK(key_slot(channel + ":0123456789abcdef") == key_slot(name));
    CHECK(key_slot(channel + std::string(dlock::ext::presence_suffix)) == key_slot(name));
  }
}
