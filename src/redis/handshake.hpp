// The handshake that opens every connection (AUTH, SELECT, CLIENT SETNAME,
// ROLE when only a master will do, then PING), and what its replies say
// about the connection.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <boost/system/error_code.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/request.hpp>

namespace dlock::redis::detail {

// Sans-I/O: the connection writes commands(), reads replies_expected()
// replies, and asks verdict() whether the connection may serve requests.
class handshake {
 public:
  explicit handshake(const config& cfg) {
    if (!cfg.password.empty()) {
      if (cfg.user.empty()) commands_.push("AUTH", cfg.password);
      else commands_.push("AUTH", cfg.user, cfg.password);
      steps_.push_back(step::auth);
    }
    if (cfg.database != 0) {
      commands_.push("SELECT", cfg.database);
      steps_.push_back(step::select);
    }
    if (!cfg.client_name.empty()) {
      commands_.push("CLIENT", "SETNAME", cfg.client_name);
      steps_.push_back(step::setname);
    }
    if (cfg.require_master) {
      commands_.push("ROLE");
      steps_.push_back(step::role);
    }
    // Always end with a PING: it proves the server answers commands, and it
    // reports NOAUTH when the server wants a password we do not have.
    commands_.push("PING");
  }

  const request& commands() const noexcept { return commands_; }
  std::size_t replies_expected() const noexcept { return commands_.size(); }

  // The first failure among `replies` (one per command, in order), or
  // success: auth_failed, select_failed, not_master (ROLE names another
  // role), server_error for an error reply to the PING (say, LOADING), or
  // unexpected_handshake_reply for a reply Redis never gives to that
  // command (AUTH, SELECT and CLIENT SETNAME answer the status OK, PING the
  // status PONG, ROLE an array that starts with the role's name).
  boost::system::error_code verdict(const response& replies) const {
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const value& r = replies[i];
      if (!r.is_error()) {
        if (i >= steps_.size()) {
          if (!is_status(r, "PONG")) return error::unexpected_handshake_reply;
        } else if (steps_[i] == step::role) {
          if (!is_role(r)) return error::unexpected_handshake_reply;
          if (r.elements[0].str != "master") return error::not_master;
        } else if (!is_status(r, "OK")) {
          return error::unexpected_handshake_reply;
        }
        continue;
      }
      // A server that wants a password says so to whichever command comes
      // first, whatever that command was.
      bool noauth = starts_with_ci(r.str, "NOAUTH");
      if (i >= steps_.size()) return noauth ? error::auth_failed : error::server_error;  // the PING
      switch (steps_[i]) {
        case step::auth: return error::auth_failed;
        case step::select: return noauth ? error::auth_failed : error::select_failed;
        case step::setname:
          if (noauth) return error::auth_failed;
          break;  // an ACL may forbid CLIENT SETNAME; the name is cosmetic
        case step::role:
          // The role cannot be checked, so the server cannot be trusted
          // to be a master.
          return noauth ? error::auth_failed : error::not_master;
      }
    }
    return {};
  }

 private:
  enum class step : unsigned char { auth, select, setname, role };

  // ROLE's reply: an array that starts with the role's name, ["master",
  // offset, [replicas...]] on a master.
  static bool is_role(const value& r) {
    return r.is_array() && !r.elements.empty() && r.elements[0].is_string();
  }

  // A status reply (`+OK`), not a bulk string that happens to say the same.
  static bool is_status(const value& r, std::string_view text) {
    return r.type == kind::simple_string && r.str == text;
  }

  static bool starts_with_ci(std::string_view s, std::string_view upper_prefix) {
    if (s.size() < upper_prefix.size()) return false;
    for (std::size_t i = 0; i < upper_prefix.size(); ++i) {
      char a = s[i];
      if (a >= 'a' && a <= 'z') a = static_cast<char>(a - 'a' + 'A');
      if (a != upper_prefix[i]) return false;
    }
    return true;
  }

  request commands_;
  std::vector<step> steps_;  // what each command before the PING was
};

}  // namespace dlock::redis::detail
