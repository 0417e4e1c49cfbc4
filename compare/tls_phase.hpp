// dlock-compare's TLS phase (--backend tls): what TLS costs, on one private
// redis-server that listens on a plain-text port and a TLS port at once (one
// process, so both sides of each ratio reach the same server): the blocking
// PING, and each combination's uncontended cycle, over TLS against plain
// TCP, in alternating blocks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/redis_server.hpp>

#include "measure.hpp"
#include "report.hpp"

namespace dlock::compare {

/// The server of the TLS phase, with harness-made certificates (a CA and a
/// server certificate for 127.0.0.1), and a backend on each of its ports.
struct tls_servers {
  std::shared_ptr<const test::tls_files> files = std::make_shared<const test::tls_files>();
  test::redis_server server{options(files)};
  RedisBackend plain{"redis://127.0.0.1:" + std::to_string(server.plain_port())};
  RedisBackend tls{server.url()};

  static test::server_options options(std::shared_ptr<const test::tls_files> f) {
    test::server_options o;
    o.tls = std::move(f);
    o.plain_port_too = true;
    return o;
  }
  std::string describe() const {
    return "one redis-server with a plain-text port and a TLS port (TLS 1.3, EC P-256 certificate, "
           "the chain and the IP address verified)";
  }
};

/// Blocks of `k` measurements of `plain` then `tls`, `pairs` times: each
/// pair's ratio is the TLS block's median over the plain block's beside it.
template <class Plain, class Tls>
tls_row alternate(std::string name, int n, int pairs, Plain plain, Tls tls) {
  tls_row row;
  row.name = std::move(name);
  std::vector<double> a, b;
  for (int pair = 0; pair < pairs; ++pair) {
    const int k = n / pairs + (pair < n % pairs ? 1 : 0);
    const double base = plain(k, a);
    row.pairs.push_back(tls(k, b) / base);
  }
  row.plain = percentiles(a);
  row.tls = percentiles(b);
  return row;
}

/// `k` PINGs through the backend's blocking path, appended to `into`; the
/// block's median.
inline double ping_block(RedisBackend& redis, int k, std::vector<double>& into) {
  std::vector<double> mine;
  for (int i = 0; i < k; ++i) mine.push_back(one_ping(redis));
  into.insert(into.end(), mine.begin(), mine.end());
  return median(mine);
}

/// The PING row.
inline tls_row tls_ping(tls_servers& s, int n, int pairs) {
  std::vector<double> warm;
  ping_block(s.plain, 20, warm);
  ping_block(s.tls, 20, warm);
  return alternate(
      "PING", n, pairs, [&](int k, std::vector<double>& into) { return ping_block(s.plain, k, into); },
      [&](int k, std::vector<double>& into) { return ping_block(s.tls, k, into); });
}

/// L's uncontended cycle (L is a lock on RedisBackend).
template <class L>
tls_row tls_cycles(tls_servers& s, const std::string& key, int n, int pairs) {
  L plain(s.plain, key + ":plain");
  L tls(s.tls, key + ":tls");
  std::vector<double> warm;
  timed_cycles(plain, 5, warm);
  timed_cycles(tls, 5, warm);
  return alternate(
      L::combination_name(), n, pairs, [&](int k, std::vector<double>& into) { return timed_cycles(plain, k, into); },
      [&](int k, std::vector<double>& into) { return timed_cycles(tls, k, into); });
}

}  // namespace dlock::compare
