// Every combination over mutual TLS (rediss:// with a client certificate,
// to a TLS-only server that requires one): the blocking and async
// interfaces, the renewals, and the waits that listen on the subscriber
// connection all run through TLS sessions.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/use_future.hpp>

#include <dlock/combinations.hpp>
#include <support/redis_server.hpp>

#include "lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::take_within;

namespace {

std::shared_ptr<const dlock::test::tls_files> files() {
  static const auto made = std::make_shared<const dlock::test::tls_files>();
  return made;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("every combination works over mutual TLS", "[tls]", dlock::combinations::all_t<>) {
  using L = TestType;
  dlock::test::server_options opts;
  opts.tls = files();
  opts.tls_auth_clients = "yes";
  redis_server server(opts);
  auto cfg = dlock::redis::parse_url(server.url() + "&cert_file=" + files()->client().cert +
                                     "&key_file=" + files()->client().key);
  dlock::RedisBackend a(cfg), b(cfg);
  const std::string name = "tls:" + L::combination_name();
  INFO(L::combination_name());
  auto first = dlock::test::make_lock<L>(a, name);
  auto second = dlock::test::make_lock<L>(b, name);
  {
    auto hold = first->acquire();  // the blocking path
    CHECK_FALSE(second->try_acquire());
    auto waiter = std::async(std::launch::async, [&] { return take_within(*second, scaled(5s)).has_value(); });
    std::this_thread::sleep_for(scaled(100ms));
    hold.release();
    CHECK(waiter.get());
  }
  // The async interface, on the shared connection.
  auto hold = first->async_try_acquire_for("async-owner", scaled(5s), boost::asio::use_future).get();
  CHECK(hold.owns_lock());
  CHECK_FALSE(second->try_acquire());
  first->async_release(hold, boost::asio::use_future).get();
  CHECK_FALSE(hold.owns_lock());
  CHECK(take_within(*second, scaled(5s)).has_value());
}
