// A churning client for the fault suite (tests/faults/) and lock_worker's
// churn mode: for a while, it takes one of a few locks at random, holds it
// a moment and lets it go, and logs every hold to a file as it goes, so
// that the holds of a process that is killed or stopped are not lost.
//
// The log's lines (one write() each, so that a kill cannot tear one):
//   took <lock> <worker> <start_ns>         a hold began (it is open until
//                                            its "hold" line says otherwise)
//   hold <lock> <worker> <start> <end>      it ended (support/hold_history):
//                                            its end is when the holder let
//                                            go, or its loss deadline if
//                                            that came first (a holder
//                                            stopped past its lease)
//   error <lock> <worker> <code> <message>  an acquire or release failed
//                                            (code: category:value)
//   done <holds>                            the run ended
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <support/hold_history.hpp>

#include "lock_support.hpp"

namespace dlock::test {

/// L's ownership with fencing tokens on, where it has them (the paused
/// holder of the fault suite, and the lock that takes over from it).
template <class L>
typename L::ownership_type fenced_ownership() {
  typename L::ownership_type o{};
  if constexpr (requires { o.fencing = fencing_tokens{}; }) o.fencing = fencing_tokens{};
  return o;
}

/// What a churning client does: `locks` locks named "<prefix>.<i>", each
/// hold with `lease` and lasting up to `work`, for `length`, logging to
/// `log` (a file path).
struct churn_plan {
  std::string prefix;
  int locks = 1;
  std::chrono::milliseconds lease{2000};
  std::chrono::milliseconds length{2000};
  std::string log;
  std::chrono::milliseconds work{2};

  std::string lock_name(int i) const { return prefix + "." + std::to_string(i); }

  /// "prefix,locks,lease_ms,log[,work_ms]" and a length in ms, as
  /// lock_worker takes them; nullopt for anything else.
  static std::optional<churn_plan> parse(const std::string& spec, long long length_ms) {
    std::vector<std::string> parts;
    std::size_t from = 0;
    for (std::size_t at; (at = spec.find(',', from)) != std::string::npos; from = at + 1)
      parts.push_back(spec.substr(from, at - from));
    parts.push_back(spec.substr(from));
    if (parts.size() < 4 || parts.size() > 5 || parts[0].empty() || parts[3].empty() || length_ms <= 0)
      return std::nullopt;
    churn_plan p;
    p.prefix = parts[0];
    p.locks = std::atoi(parts[1].c_str());
    p.lease = std::chrono::milliseconds(std::atoll(parts[2].c_str()));
    p.log = parts[3];
    p.length = std::chrono::milliseconds(length_ms);
    if (parts.size() == 5) p.work = std::chrono::milliseconds(std::atoll(parts[4].c_str()));
    if (p.locks <= 0 || p.lease.count() <= 0 || p.work.count() <= 0) return std::nullopt;
    return p;
  }
  std::string spec() const {
    return prefix + "," + std::to_string(locks) + "," + std::to_string(lease.count()) + "," + log + "," +
           std::to_string(work.count());
  }
};

/// Appends whole lines to a file, one write() each.
class line_log {
 public:
  explicit line_log(const std::string& path) : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + path);
  }
  ~line_log() { ::close(fd_); }
  line_log(const line_log&) = delete;
  line_log& operator=(const line_log&) = delete;
  void write(std::string line) {
    line += '\n';
    for (std::size_t done = 0; done < line.size();) {
      auto n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) std::abort();  // a lost line could hide a failure: end loudly
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
};

/// An error's code as the log writes it: "category:value".
inline std::string error_code_word(std::error_code ec) {
  return std::string(ec.category().name()) + ":" + std::to_string(ec.value());
}

/// The log's line for an error of `worker` on `lock`, in `step` ("acquire"
/// or "release"), ending "@<monotonic_ns> <step>" (when it was logged).
inline std::string error_line(const std::string& lock, const std::string& worker, std::error_code ec,
                              const char* step) {
  return "error " + lock + " " + worker + " " + error_code_word(ec) + " " + ec.message() + " @" +
         std::to_string(monotonic_ns()) + " " + step;
}

/// Runs `plan` with locks of type L on `backend` as client `worker`;
/// returns how many holds it logged.
template <class L>
long long churn(typename L::backend_type& backend, const churn_plan& plan, const std::string& worker) {
  using namespace std::chrono;
  line_log log(plan.log);
  std::vector<std::unique_ptr<L>> locks;
  for (int i = 0; i < plan.locks; ++i) locks.push_back(make_lock<L>(backend, plan.lock_name(i), plan.lease));
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<long long> work_us(0, plan.work.count() * 1000);
  std::uniform_int_distribution<int> pick(0, plan.locks - 1);
  const auto end = steady_clock::now() + plan.length;
  long long holds = 0;
  while (steady_clock::now() < end) {
    const int i = pick(rng);
    const std::string name = plan.lock_name(i);
    std::error_code ec;
    auto hold = locks[i]->try_acquire_for(plan.lease, ec);
    if (!hold) {
      if (ec && ec != error::not_acquired) log.write(error_line(name, worker, ec, "acquire"));
      std::this_thread::sleep_for(milliseconds(1));  // TryOnce returns at once
      continue;
    }
    hold_span span{name, worker, monotonic_ns(), 0, false};
    log.write("took " + name + " " + worker + " " + std::to_string(span.start_ns));
    // The hold's loss deadline, as last seen: the span ends there if the
    // holder is stopped past it (a pause), since the lock promises only
    // that nobody else gets in before the signal.
    auto trusted = [&hold] {
      const auto left = hold->remaining_lease();
      return left == milliseconds::max() ? INT64_MAX
                                         : monotonic_ns() + duration_cast<nanoseconds>(left).count();
    };
    std::int64_t deadline = trusted();
    for (auto until = steady_clock::now() + microseconds(work_us(rng)); steady_clock::now() < until;) {
      std::this_thread::sleep_for(std::min<steady_clock::duration>(until - steady_clock::now(), milliseconds(5)));
      if (hold->remaining_lease() > milliseconds::zero()) deadline = std::max(deadline, trusted());
    }
    span.end_ns = std::max(span.start_ns, std::min(monotonic_ns(), deadline));
    log.write(span.format());
    ++holds;
    hold->release(ec);
    if (ec) log.write(error_line(name, worker, ec, "release"));
  }
  log.write("done " + std::to_string(holds));
  return holds;
}

}  // namespace dlock::test
