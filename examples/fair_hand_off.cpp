// Who gets the lock next? Eight workers, each with its own connection, take
// one lock in turn as fast as they can, with three ways of waiting:
// - token/fixed/spin: every waiter polls every 100 ms. The worker that just
//   released tries again at once and usually wins: the others starve.
// - hash/fixed/pubsub (Redisson's wait): a release wakes the waiters, who
//   race for the lock; the releasing worker races too.
// - queue/fixed/handoff (dlock's FIFO): a waiter that fails joins a line,
//   and the release itself gives the lock to the first in line and tells it
//   so: workers are served in turn, each hand-off one release and one
//   message.
//
//   fair_hand_off [redis://host:port]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <support/hold_history.hpp>
#include "tour.hpp"

using namespace dlock::examples::tour;
using dlock::test::monotonic_ns;
using dlock::test::scaled;

namespace {

constexpr int workers = 8;

struct result {
  std::string name;
  int most = 0, fewest = 0, total = 0;
  double handoff_p50_us = 0;  // from a holder's unlock() call to the next holder's lock() return
  bool overlap = false;
};

// The median PING round trip of a blocking call, the unit of the hand-off.
double ping_us(dlock::RedisBackend& backend) {
  std::vector<double> samples;
  for (int i = 0; i < 501; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    backend.command(dlock::redis::request().push("PING"));
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

template <class L>
result run(const std::string& url, const std::string& key, std::chrono::milliseconds duration) {
  std::vector<std::unique_ptr<dlock::RedisBackend>> backends;
  std::vector<std::unique_ptr<L>> locks;
  for (int i = 0; i < workers; ++i) {
    backends.push_back(std::make_unique<dlock::RedisBackend>(url));
    locks.push_back(std::make_unique<L>(*backends.back(), key, typename L::ownership_type{}, r::FixedLease{30s}));
  }
  dlock::test::hold_history history;  // every critical section, on CLOCK_MONOTONIC
  std::vector<int> count(workers, 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&, i] {
      auto& lock = *locks[static_cast<std::size_t>(i)];
      while (!stop) {
        lock.lock();
        auto start = monotonic_ns();
        ++count[static_cast<std::size_t>(i)];
        auto end = monotonic_ns();
        history.add({key, "worker-" + std::to_string(i), start, end});
        lock.unlock();
      }
    });
  }
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& t : threads) t.join();

  result out;
  out.name = L::combination_name();
  out.most = *std::max_element(count.begin(), count.end());
  out.fewest = *std::min_element(count.begin(), count.end());
  for (int c : count) out.total += c;
  auto spans = history.spans();
  std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
  std::vector<double> gaps;
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].worker != spans[i - 1].worker)  // a hand-off to another worker
      gaps.push_back(static_cast<double>(spans[i].start_ns - spans[i - 1].end_ns) / 1000.0);
  if (!gaps.empty()) {
    std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
    out.handoff_p50_us = gaps[gaps.size() / 2];
  }
  out.overlap = !history.overlaps().empty();
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  dlock::examples::example_redis target(argc, argv);
  dlock::RedisBackend probe(target.url);
  const auto duration = scaled(2s);
  const double ping = ping_us(probe);
  std::printf("%d workers, each with its own connection, take one lock in turn for %lld ms; PING %.1f us\n\n",
              workers, static_cast<long long>(duration.count()), ping);

  std::vector<result> results;
  results.push_back(run<dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>>(
      target.url, "tour:fair:spin", duration));
  results.push_back(run<dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::FixedLease, w::PubSub>>(
      target.url, "tour:fair:pubsub", duration));
  results.push_back(run<dlock::Lock<dlock::RedisBackend, o::Queue, r::FixedLease, w::HandOff>>(
      target.url, "tour:fair:handoff", duration));

  std::printf("  %-22s %12s %16s %22s\n", "lock", "acquisitions", "most / fewest", "hand-off p50 in PINGs");
  for (auto& res : results)
    std::printf("  %-22s %12d %9d / %-6d %22.2f%s\n", res.name.c_str(), res.total, res.most, res.fewest,
                res.handoff_p50_us / ping, res.overlap ? "  OVERLAP" : "");
  std::printf(
      "\nSpin: the worker that just released asks again at once, while the others sleep out their\n"
      "100 ms, so it takes the lock straight back. Pub/sub: a release wakes the waiters and they\n"
      "race; whoever's try lands first wins, the releasing worker included. The FIFO line: the\n"
      "release itself hands the lock to the worker that has waited longest and tells it so, so\n"
      "every worker gets its turn and no waiter tries in vain.\n");

  auto fairness = [](const result& res) { return res.most > 0 ? double(res.fewest) / res.most : 0.0; };
  const auto& fifo = results.back();
  bool fairest = std::all_of(results.begin(), results.end() - 1,
                             [&](const result& res) { return fairness(fifo) > fairness(res); });
  bool overlap = std::any_of(results.begin(), results.end(), [](const result& res) { return res.overlap; });
  if (overlap) std::printf("verdict: two holders overlapped, which no lock here may allow\n");
  else if (fairest)
    std::printf("verdict: the FIFO hand-off was the fairest: fewest/most %.2f, against %.2f for spin and %.2f for pub/sub\n",
                fairness(fifo), fairness(results[0]), fairness(results[1]));
  else
    std::printf("verdict: the FIFO hand-off was not the fairest this time (fewest/most %.2f, spin %.2f, pub/sub %.2f)\n",
                fairness(fifo), fairness(results[0]), fairness(results[1]));
  return overlap ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fair_hand_off: %s\n", e.what());
  return 1;
}
