// How a failed connect is reported: the OS or resolver error as one of dlock's
// connection errors, and which of them retrying cannot fix.
#pragma once

#include <boost/asio/error.hpp>
#include <boost/system/errc.hpp>
#include <boost/system/error_code.hpp>

#include <dlock/error.hpp>

namespace dlock::redis::detail {

// Connect errors that retrying will not fix; queued requests fail at once.
inline bool is_permanent(const boost::system::error_code& ec) {
  return ec == error::auth_failed || ec == error::select_failed || ec == error::tls_certificate_rejected ||
         ec == error::tls_hostname_mismatch || ec == error::tls_client_certificate_rejected;
}

// dlock's TLS connect errors.
inline bool is_tls_error(const boost::system::error_code& ec) {
  return ec == error::tls_handshake_failed || ec == error::tls_certificate_rejected ||
         ec == error::tls_hostname_mismatch || ec == error::tls_client_certificate_rejected;
}

inline boost::system::error_code map_connect_error(const boost::system::error_code& ec) {
  namespace aerr = boost::asio::error;
  if (ec == aerr::connection_refused || ec == aerr::no_such_device ||
      ec == boost::system::errc::no_such_file_or_directory)
    return error::connection_refused;
  if (ec == aerr::host_not_found || ec == aerr::host_not_found_try_again || ec == aerr::no_data ||
      ec == aerr::no_recovery)
    return error::resolve_failed;
  return ec;
}

// What a failed connect reports, to connect waiters and to requests it kept
// from being written: one of dlock's connection errors. Anything else (an
// end-of-file or reset during the handshake, an error reply to PING such as
// LOADING, an abort by drop_connection) only means "not connected". The
// errors of finding a master (not_master, unknown_master, no_sentinel), a
// handshake answered as Redis never does and a failed TLS handshake are
// kept: they say what to fix.
inline boost::system::error_code to_connect_error(const boost::system::error_code& ec) {
  auto mapped = map_connect_error(ec);
  if (mapped == error::connection_refused || mapped == error::resolve_failed ||
      mapped == error::connect_timeout || is_permanent(mapped) || mapped == error::unexpected_handshake_reply ||
      mapped == error::not_master || mapped == error::unknown_master || mapped == error::no_sentinel ||
      is_tls_error(mapped))
    return mapped;
  return error::not_connected;
}

}  // namespace dlock::redis::detail
