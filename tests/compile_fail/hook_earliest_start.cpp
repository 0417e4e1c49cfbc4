// expect: its earliest_start does not match the hook
#include "hooked_wait.hpp"
// earliest_start as a member that is not static: a resolved try's lease
// would be counted from the wrong moment.
struct Early : dlock::ownership::Token {
  std::chrono::steady_clock::time_point earliest_start(const dlock::ext::hold_record&,
                                                       std::chrono::steady_clock::time_point sent) const;
};
static_assert(lock_named<Early, dlock::wait::Spin>);
