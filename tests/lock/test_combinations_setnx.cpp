// Every valid combination with ownership::SetNx, against a real redis-server.
#include <set>

#include <boost/hana/unpack.hpp>

#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::SetNx, "setnx")

// The list itself: the rule table leaves 51 locks, each named once, and the
// per-ownership lists (one test executable each) cover it exactly.
namespace {
namespace c = dlock::combinations;
namespace hana = boost::hana;
static_assert(decltype(hana::size(c::all()))::value == 51);
// Every ownership's sub-list, summed over the ownership axis.
constexpr std::size_t per_ownership = hana::unpack(c::ownerships, [](auto... o) {
  return (std::size_t{0} + ... + decltype(hana::size(c::with_ownership<typename decltype(o)::type>()))::value);
});
static_assert(per_ownership == decltype(hana::size(c::all()))::value);
}  // namespace

TEST_CASE("the compile-time list names every valid combination once", "[combinations]") {
  std::set<std::string> names;
  dlock::combinations::for_each([&](auto type) {
    using L = typename decltype(type)::type;
    names.insert(L::combination_name());
  });
  CHECK(names.size() == 51);
  CHECK(names.count("hash/watchdog/pubsub") == 1);   // dlock::Lock<>, Redisson's default
  CHECK(names.count("setnx/none/tryonce") == 1);     // A1
  CHECK(names.count("token/fixed/pubsub") == 0);     // nothing publishes
  CHECK(names.count("setnx/watchdog/spin") == 0);    // unchecked extend
  CHECK(names.count("getset/watchdog/spin") == 0);   // no owner id
  CHECK(names.count("token/none/spin") == 1);        // A2n: redis-py's Lock(name)
  CHECK(names.count("queue/fixed/handoff") == 1);    // FIFO
  CHECK(names.count("queue/none/handoff") == 0);     // a line needs a lease
  CHECK(names.count("queue/fixed/spin") == 0);       // only HandOff keeps the line
  CHECK(names.count("token/fixed/handoff") == 0);    // only Queue grants
  CHECK(names.count("hash/none/spin") == 0);         // needs a lease
  CHECK(names.count("getset/none/spin") == 0);       // the value is the expiry
  CHECK(names.count("naive/fixed/spin") == 1);       // A3n: DEL then SETNX
  CHECK(names.count("naive/watchdog/spin") == 0);    // no owner id
}
