// A program built against an installed dlock, as a user's would be: by
// CMake's find_package(dlock) or by Meson's dependency('dlock') through
// pkg-config (tests/consumers/check_consumers.py builds it both ways).
//
// usage: consumer REDIS_URL EXPECTED_VERSION
// Takes Lock<> (compiled in libdlock) and a Token/FixedLease/Spin lock
// (compiled here) on the server, each against a second client, and checks
// that the second client is kept out while the first holds the lock.
#include <dlock/dlock.hpp>
#include <dlock/version.hpp>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: %s\n", what);
    ++failures;
  }
}

template <class LockT>
void exclusive(dlock::RedisBackend& a, dlock::RedisBackend& b, const std::string& name) {
  LockT first(a, name);
  LockT second(b, name);
  {
    std::lock_guard guard(first);
    check(!second.try_lock_for(std::chrono::milliseconds(50)), "a second client took a held lock");
  }
  check(second.try_lock(), "a second client could not take a released lock");
  second.unlock();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer REDIS_URL EXPECTED_VERSION\n");
    return 2;
  }
  check(dlock::version() == argv[2], "dlock::version() is not the expected version");
  check(dlock::version() == DLOCK_VERSION_STRING, "the library's version is not the headers' version");

  dlock::RedisBackend a(argv[1]);
  dlock::RedisBackend b(argv[1]);
  exclusive<dlock::Lock<>>(a, b, "consumer:default");
  exclusive<dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::Spin>>(
      a, b, "consumer:token");
  if (failures != 0) return 1;
  std::printf("consumer: dlock %s, two locks taken and released\n", std::string(dlock::version()).c_str());
  return 0;
}
