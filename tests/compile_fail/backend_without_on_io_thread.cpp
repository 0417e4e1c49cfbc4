// expect: dlock::Lock backend: lacks on_io_thread()
#include <dlock/dlock.hpp>
// Everything a backend needs but the question "is this one of your threads?".
namespace r = dlock::redis;
template <class... T>
using done = boost::asio::awaitable<std::tuple<T...>>;
struct Bare {
  boost::asio::any_io_executor get_executor() const;
  std::string client_id() const;
  template <class Token> done<r::error_code, r::response> async_exec(std::string_view, r::request, Token&&);
  template <class Token> done<r::error_code, r::value> async_eval(const r::script&, std::vector<std::string>, std::vector<std::string>, Token&&);
  template <class Token> done<std::vector<r::call_result>> async_eval_all(std::vector<r::script_call>, Token&&);
  template <class Token> done<r::error_code, r::subscription> async_subscribe(std::string_view, std::string, r::listener, Token&&);
  template <class Service> Service& use_service();
};
template class dlock::Lock<Bare, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::Spin>;
