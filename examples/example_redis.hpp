// The Redis a tour program talks to: the URL given as its first argument,
// or a private redis-server it starts on a free port of 127.0.0.1 (and
// stops when it exits).
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include <support/redis_server.hpp>

namespace dlock::examples {

struct example_redis {
  std::optional<test::redis_server> server;
  std::string url;

  example_redis(int argc, char** argv) {
    if (argc > 1) {
      url = argv[1];
      return;
    }
    server.emplace();
    url = server->url();
    std::printf("started a private redis-server: %s\n", url.c_str());
  }
};

}  // namespace dlock::examples
