// The tour, RW: a read-write lock whose readers enter whenever it is shared
// (Redisson's RReadWriteLock, "non-fair") can keep a writer out for as long
// as readers keep coming. Four reader threads take turns, each holding the
// lock shared for a while and taking it again at once; a reader leaves only
// once another reader is in, so that at every moment some reader holds it,
// as under a steady stream of readers. A writer asks for it meanwhile.
// Without a writer's intent (ReadWrite{.writer_intent = false}) the writer
// waits its whole deadline in vain. With it (dlock's default), no new
// reader enters, the readers inside finish, the last one leaves after a
// short wait alone, and the writer gets in.
//
// The hand-over between readers is what makes the story the same on a busy
// machine: readers that merely took turns on a schedule drifted into a
// moment when none held the lock, and the writer got in through it.
//
//   writer_starvation [redis://host:port]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tour.hpp"

namespace {

using namespace dlock::examples::tour;
using RW = dlock::Lock<dlock::RedisBackend, o::ReadWrite, r::FixedLease, w::Spin>;

const ms read_hold = dlock::test::scaled(40ms);
const ms handover_limit = read_hold * 4;  // with the intent: the longest a reader alone waits for another
const ms writer_deadline = dlock::test::scaled(1500ms);
constexpr int readers = 4;

struct outcome {
  bool written = false;
  long long waited_ms = 0;
  int reads = 0;  // reader holds while the writer waited
};

// The readers take turns on `name` (staggered, and each leaving only once
// another is in, so that one always holds) while a writer asks for it,
// with or without its intent.
outcome run(const std::string& url, const std::string& name, bool intent) {
  o::ReadWrite rw;
  rw.writer_intent = intent;
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<int> inside{0};  // readers whose shared hold began and has not been given up
  std::atomic<int> joined{0};  // readers that have held the lock at least once
  std::vector<std::thread> pool;
  for (int i = 0; i < readers; ++i) {
    pool.emplace_back([&, i] {
      dlock::RedisBackend redis(url);
      RW lock(redis, name, rw, r::FixedLease{dlock::test::scaled(10s)}, w::Spin{dlock::test::scaled(5ms)});
      std::this_thread::sleep_for(read_hold * i / readers);
      bool first = true;
      while (!stop) {
        std::shared_lock reading(lock, std::defer_lock);
        if (!reading.try_lock_for(dlock::test::scaled(5s))) continue;
        ++reads;
        if (std::exchange(first, false)) ++joined;
        ++inside;
        std::this_thread::sleep_for(read_hold);
        // Hand over: stay until another reader is in (readers keep coming).
        // With the writer's intent none can come in, so there a reader
        // alone leaves after `handover_limit`; without it, it waits on.
        // Leaving is one atomic step from "n inside" to "n - 1", taken only
        // while n >= 2, so two readers cannot both leave as the last
        // ones. `inside` drops before the release and rises after the
        // acquire: it never counts more readers than hold the lock.
        const auto give_up = steady::now() + handover_limit;
        for (int n = inside.load();;) {
          if (n >= 2) {
            if (inside.compare_exchange_weak(n, n - 1)) break;
            continue;
          }
          if (stop || (intent && steady::now() >= give_up)) {
            --inside;
            break;
          }
          std::this_thread::sleep_for(1ms);
          n = inside.load();
        }
      }
    });
  }
  // The stream is flowing: every reader has been in (however long a
  // loaded machine takes to connect them), and one reader's hold more.
  dlock::test::wait_until([&] { return joined == readers; });
  std::this_thread::sleep_for(read_hold);
  dlock::RedisBackend redis(url);
  RW writer(redis, name, rw, r::FixedLease{dlock::test::scaled(10s)}, w::Spin{dlock::test::scaled(10ms)});
  const int before = reads;
  const auto asked = steady::now();
  std::unique_lock writing(writer, std::defer_lock);
  outcome out;
  out.written = writing.try_lock_for(writer_deadline);
  out.waited_ms = std::chrono::duration_cast<ms>(steady::now() - asked).count();
  out.reads = reads - before;
  if (out.written) writing.unlock();
  stop = true;
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  std::printf("%d readers take turns, each holding the lock shared for %lld ms and leaving once another reader is in\n"
              "(with the writer's intent, where none can come in, after %lld ms alone); a writer waits at most %lld ms.\n\n",
              readers, static_cast<long long>(read_hold.count()), static_cast<long long>(handover_limit.count()),
              static_cast<long long>(writer_deadline.count()));

  auto plain = run(target.url, "report:plain", false);
  std::printf("rw without a writer's intent (Redisson's readers enter while the lock is shared):\n");
  std::printf("  the writer %s after %lld ms; %d reader holds began meanwhile.\n",
              plain.written ? "got in" : "gave up", plain.waited_ms, plain.reads);

  auto fair = run(target.url, "report:intent", true);
  std::printf("rw with the writer's intent (dlock's default: a waiting writer keeps new readers out):\n");
  std::printf("  the writer %s after %lld ms; %d reader holds began meanwhile.\n",
              fair.written ? "got in" : "gave up", fair.waited_ms, fair.reads);

  std::printf("\nWhat it teaches: a lock that lets readers in whenever it is shared serves readers for ever when\n"
              "they overlap; the writer must be able to say \"me next\", and new readers must listen.\n");
  const bool as_designed = !plain.written && fair.written;
  if (as_designed)
    std::printf("verdict: without the intent the readers kept the writer out for its whole wait; with it, the writer "
                "got in once the readers inside were done\n");
  else
    std::printf("verdict: unexpected, see above\n");
  return as_designed ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "writer_starvation: %s\n", e.what());
  return 2;
}
