// expect: nothing (hooks.hpp compiles included first, alone)
#include <dlock/hooks.hpp>
static_assert(!dlock::detail::hands_off<int>());
