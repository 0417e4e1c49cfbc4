// expect: watchdog renewal needs an ownership policy with an owner id: use ownership::Token or ownership::ReentrantHash, or renewal::FixedLease
// build_your_own.cpp's lock with ownership::SetNx in place of Token: a
// watchdog would renew the key with an extend that checks no owner, and so
// could keep someone else's lock alive. The rule table refuses it at compile
// time; the compile-fail suite (tests/compile_fail) checks the sentence
// above. Not built with the examples: it must not compile.
#include <dlock/dlock.hpp>

using MyLock = dlock::Lock<dlock::RedisBackend, dlock::ownership::SetNx, dlock::renewal::Watchdog,
                           dlock::wait::Backoff>;

int main() { return MyLock::combination_name().empty() ? 1 : 0; }
