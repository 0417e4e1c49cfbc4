// SetNx's and Token's locks on RedisBackend, compiled once for the tests,
// dlock-compare and the benchmarks (see lock_instances.hpp); and the check
// that the lists there are dlock::combinations::all<>(), in its order.
#include <boost/hana/append.hpp>
#include <boost/hana/equal.hpp>

#include <dlock/combinations.hpp>

#include "lock_instances.hpp"

#define DLOCK_TEST_INSTANTIATE_LOCK(O, R, W) template class DLOCK_TEST_LOCK_TYPE(O, R, W);
DLOCK_TEST_SETNX_LOCKS(DLOCK_TEST_INSTANTIATE_LOCK)
DLOCK_TEST_TOKEN_LOCKS(DLOCK_TEST_INSTANTIATE_LOCK)

// Each entry with a comma after it; `void` ends the list.
#define DLOCK_TEST_LOCK_ENTRY(O, R, W) DLOCK_TEST_LOCK_TYPE(O, R, W),
static_assert(decltype(boost::hana::equal(
                  boost::hana::tuple_t<DLOCK_TEST_ALL_LOCKS(DLOCK_TEST_LOCK_ENTRY) void>,
                  boost::hana::append(dlock::combinations::all<>(), boost::hana::type_c<void>)))::value,
              "lock_instances.hpp's lists are not dlock::combinations::all<>(), in its order: update them");
