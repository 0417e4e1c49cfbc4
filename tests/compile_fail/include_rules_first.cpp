// expect: nothing (rules.hpp compiles included first, alone)
#include <dlock/rules.hpp>
static_assert(!dlock::detail::queues<int>());
