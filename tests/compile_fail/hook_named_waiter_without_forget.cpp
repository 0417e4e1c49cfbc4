// expect: its hold_state is a named_waiter but it lacks forget_waiter
#include "hooked_wait.hpp"
// An ownership whose release would name the waiter it wakes, with no way
// for a waiter that gives up to take its number out of the line.
struct Named : dlock::ownership::SetNx {
  using hold_state = dlock::ext::named_waiter;
};
static_assert(lock_named<Named, dlock::wait::Spin>);
