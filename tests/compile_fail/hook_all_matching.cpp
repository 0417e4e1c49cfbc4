// expect: nothing (every hook of the contract, each as it should be)
#include "hooked_wait.hpp"
struct Hooks {
  template <class O, class Rec>
  boost::asio::awaitable<void> before_try(const O&, Rec&, std::chrono::steady_clock::time_point);
  template <class O, class Rec>
  bool granted(const O&, Rec&);
  template <class O, class Rec>
  void after_try(const O&, const std::shared_ptr<Rec>&, const dlock::attempt&);
  template <class O, class Rec>
  boost::asio::awaitable<bool> leave(const O&, const std::shared_ptr<Rec>&, dlock::ext::background&);
  void done();
  std::string server_reply() const;
};
static_assert(lock_named<dlock::ownership::Token, HookedWait<Hooks>>);
// An ownership's optional hooks, each as it should be.
struct Batching : dlock::ownership::Token {
  static std::vector<dlock::renewal_verdict> read_extend_batch(const dlock::redis::value&, std::size_t);
};
static_assert(lock_named<Batching, dlock::wait::Spin>);
