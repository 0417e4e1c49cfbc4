// expect: its read_extend does not match the hook
#include "hooked_wait.hpp"
// read_extend answering bool: the watchdog would read the replies the
// usual way, not this ownership's.
struct Reader : dlock::ownership::Token {
  static bool read_extend(const dlock::redis::value&);
};
static_assert(lock_named<Reader, dlock::wait::Spin>);
