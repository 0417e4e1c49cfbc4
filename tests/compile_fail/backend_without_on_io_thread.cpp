// expect: dlock::Lock backend: lacks on_io_thread()
#include <dlock/dlock.hpp>
// Everything a backend needs but the question "is this one of your threads?".
struct Bare {
  boost::asio::any_io_executor get_executor() const;
  std::string client_id() const;
  template <class Token> void async_exec(dlock::redis::request, Token&&);
  template <class Token> void async_eval(const dlock::redis::script&, std::vector<std::string>, std::vector<std::string>, Token&&);
  template <class Token> void async_subscribe(std::string, dlock::redis::listener, Token&&);
  template <class Service> Service& use_service();
};
template class dlock::Lock<Bare, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::Spin>;
