// expect: has leave, refresh_call or read_refresh, which only a queueing ownership
#include "hooked_wait.hpp"
// An ownership with a line to leave that does not say it queues: no wait
// would ever keep or leave its line.
struct Lined : dlock::ownership::Token {
  template <class B>
  boost::asio::awaitable<std::pair<dlock::error_code, bool>> leave(B&, dlock::ext::hold_record&) const;
};
static_assert(lock_named<Lined, dlock::wait::Spin>);
