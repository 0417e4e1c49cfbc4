// expect: its read_extend_batch does not match the hook
#include "hooked_wait.hpp"
// A batch reader without the number of holds: it could not tell a short
// reply from a full one.
struct Reader : dlock::ownership::Token {
  static std::vector<dlock::renewal_verdict> read_extend_batch(const dlock::redis::value&);
};
static_assert(lock_named<Reader, dlock::wait::Spin>);
