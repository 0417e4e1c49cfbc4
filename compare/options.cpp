#include "options.hpp"

#include <algorithm>
#include <charconv>

namespace dlock::compare {

std::string usage() {
  return "usage: dlock-compare [--redis URL] [--filter PATTERN] [--quick | --thorough] [--seconds S]\n"
         "                     [--placement same|split|free] [--backend single,sentinel,cluster,tls,\n"
         "                                redlock3,redlock5]\n"
         "                     [--out DIR] [--report DIR] [--list]\n"
         "\n"
         "Compares every lock combination dlock compiles, on one Redis, and writes\n"
         "a table to stdout, every figure to DIR/compare.json, and the run drawn to\n"
         "DIR/report.html.\n"
         "\n"
         "  --redis URL       use this server (keys under a prefix of the run's own,\n"
         "                    deleted afterwards); default: a private redis-server\n"
         "                    on a free port of 127.0.0.1\n"
         "  --filter PATTERN  only the combinations whose name contains PATTERN\n"
         "                    ('*' matches anything: 'hash/*/pubsub')\n"
         "  --quick           short measurements (the whole run in under a minute)\n"
         "  --thorough        long measurements\n"
         "  --seconds S       each contention run lasts S seconds (0.1 to 600;\n"
         "                    default 1, 0.25 with --quick, 3 with --thorough)\n"
         "  --placement P     where the uncontended phase runs: 'same' (default) pins\n"
         "                    the server and this program (and redis-py) to one\n"
         "                    CPU, 'split' to two, 'free' leaves them to the\n"
         "                    scheduler (only this program is pinned with --redis)\n"
         "  --backend LIST    single (default), sentinel, cluster, tls, redlock3,\n"
         "                    redlock5, or a comma list of them:\n"
         "                    'single,sentinel,cluster,tls,redlock3,redlock5'.\n"
         "                    sentinel starts a master with two replicas and a\n"
         "                    sentinel, measures each combination's uncontended\n"
         "                    cycle there without and with replica acknowledgement,\n"
         "                    alternating with the same cycle on one server (their\n"
         "                    ratios), and runs seed 003's failover story (three\n"
         "                    more deployments) as a fault row. cluster starts a\n"
         "                    Redis Cluster (3 masters, a replica each) and one\n"
         "                    server, and measures each combination's uncontended\n"
         "                    cycle and 8-worker hand-off on both, alternating\n"
         "                    (their ratios); then pub/sub waiting with sharded and\n"
         "                    classic pub/sub (commands and bus messages per\n"
         "                    acquisition), and many locks on clusters of 1 and 3\n"
         "                    masters (aggregate rate). tls starts one server with\n"
         "                    a plain port and a TLS port (certificates made with\n"
         "                    openssl), and measures the blocking PING and each\n"
         "                    combination's uncontended cycle on both, alternating\n"
         "                    (what TLS costs, as ratios). redlock3 and redlock5\n"
         "                    start Redlock deployments of 3 and 5 servers and one\n"
         "                    server, and measure every combination a quorum\n"
         "                    allows: its uncontended cycle and 8-worker hand-off\n"
         "                    on each, alternating (their ratios); then nodes\n"
         "                    killed up to a minority and one more, one node\n"
         "                    stalled, and the node-restart story as fault rows\n"
         "  --out DIR         where compare.json goes (default: compare-out)\n"
         "  --report DIR      where report.html goes, the run drawn: each fault story as a\n"
         "                    timeline, overlaps in red (default: beside compare.json)\n"
         "  --list            print the combinations and exit\n";
}

std::optional<options> parse_options(const std::vector<std::string_view>& args, std::string& why) {
  options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto a = args[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= args.size() || args[i + 1].empty() || args[i + 1].substr(0, 2) == "--") {
        why = std::string(a) + " needs a value";
        return false;
      }
      into = std::string(args[++i]);
      return true;
    };
    if (a == "--redis") {
      if (!value(o.redis_url)) return std::nullopt;
    } else if (a == "--filter") {
      if (!value(o.filter)) return std::nullopt;
    } else if (a == "--out") {
      if (!value(o.out_dir)) return std::nullopt;
    } else if (a == "--report") {
      if (!value(o.report_dir)) return std::nullopt;
    } else if (a == "--seconds") {
      std::string text;
      if (!value(text)) return std::nullopt;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), o.seconds);
      if (ec != std::errc() || end != text.data() + text.size() || !(o.seconds >= 0.1 && o.seconds <= 600)) {
        why = "--seconds needs a number of seconds from 0.1 to 600, not '" + text + "'";
        return std::nullopt;
      }
    } else if (a == "--backend") {
      std::string text;
      if (!value(text)) return std::nullopt;
      o.backends.clear();
      for (std::size_t at = 0; at <= text.size();) {
        auto comma = text.find(',', at);
        if (comma == std::string::npos) comma = text.size();
        auto one = text.substr(at, comma - at);
        if (one != "single" && one != "sentinel" && one != "cluster" && one != "tls" && one != "redlock3" &&
            one != "redlock5") {
          why = "--backend is a comma list of single, sentinel, cluster, tls, redlock3 and redlock5, not '" + text + "'";
          return std::nullopt;
        }
        if (std::find(o.backends.begin(), o.backends.end(), one) == o.backends.end()) o.backends.push_back(one);
        at = comma + 1;
      }
    } else if (a == "--placement") {
      std::string text;
      if (!value(text)) return std::nullopt;
      if (!test::parse_placement(text, o.placement)) {
        why = "--placement is same, split or free, not '" + text + "'";
        return std::nullopt;
      }
    } else if (a == "--quick" || a == "--thorough") {
      auto wanted = a == "--quick" ? depth::quick : depth::thorough;
      if (o.how != depth::normal && o.how != wanted) {
        why = "--quick and --thorough exclude each other";
        return std::nullopt;
      }
      o.how = wanted;
    } else if (a == "--list") {
      o.list = true;
    } else if (a == "--help" || a == "-h") {
      o.help = true;
    } else {
      why = "unknown option '" + std::string(a) + "'";
      return std::nullopt;
    }
  }
  return o;
}

bool matches(std::string_view filter, std::string_view name) {
  if (filter.empty()) return true;
  auto star = filter.find('*');
  if (star == std::string_view::npos) return name.find(filter) != std::string_view::npos;
  // Glob with '*': every piece in order, the first anchored only if the
  // pattern does not start with '*' (and likewise the last).
  std::size_t at = 0;
  bool first = true;
  while (true) {
    auto piece = filter.substr(0, star);
    if (first && !piece.empty()) {
      if (name.substr(0, piece.size()) != piece) return false;
      at = piece.size();
    } else if (!piece.empty()) {
      auto found = name.find(piece, at);
      if (found == std::string_view::npos) return false;
      at = found + piece.size();
    }
    first = false;
    if (star == std::string_view::npos) {
      // The last piece must end the name unless the pattern ended with '*'.
      return piece.empty() || name.substr(name.size() - std::min(name.size(), piece.size())) == piece;
    }
    filter = filter.substr(star + 1);
    star = filter.find('*');
  }
}

}  // namespace dlock::compare
