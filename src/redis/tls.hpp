// TLS for every connection kind (the multiplexed connection, the blocking
// one, and the one-question connections to sentinels and cluster nodes): the
// OpenSSL context a config's tls_settings describe, the per-connect session
// set-up (SNI and the name check), and what a failed handshake means.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <dlock/redis/config.hpp>

namespace dlock::redis::detail {

// The context `settings` describe: TLS 1.2 or later, the server's chain
// verified against the CAs named (or the system's trust store), and the
// client certificate and key when given. Throws std::system_error with
// error::invalid_argument and a message that names the file and the reason
// when one cannot be read or used.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const tls_settings& settings);

// TLS settings, ready for connections: the settings, and the OpenSSL
// context made from them.
struct tls_client {
  tls_settings settings;
  std::shared_ptr<boost::asio::ssl::context> context;
};

// The client for `settings` (null without): one per distinct settings in
// the process for as long as a connection holds it, so that connections
// made later (a blocking pool's, an acknowledgement lane's, a cluster node's
// found by a MOVED reply, a reconnect) neither read the files again nor
// fail on them midway; only the first, made when a backend is constructed,
// reads them. Throws as make_tls_context.
std::shared_ptr<const tls_client> shared_tls_client(const std::optional<tls_settings>& settings);

// As above for a connection's settings; TLS over a unix socket is refused
// (std::system_error, invalid_argument).
std::shared_ptr<const tls_client> tls_client_for(const config& cfg);

// Sets up a fresh session (one per connect) to `host`: SNI when the name is
// a host name, and the name the certificate must carry (SSL_set1_host for a
// host name, the IP address check for an address). False when OpenSSL
// refuses the name (say, an IPv6 address with a zone).
bool prepare_tls_session(SSL* ssl, const tls_settings& settings, const std::string& host);

// What went wrong with a TLS connect, as dlock says it.
struct tls_failure {
  boost::system::error_code code;  // one of dlock's tls_* errors
  std::string why;                 // OpenSSL's reason, and the verify result
};

// Reads a failure of the handshake, or of the first exchange after it (TLS
// 1.3 reports a refused client certificate there): `openssl_error` is the
// packed OpenSSL error (ERR_get_error; 0 when the stream simply ended) and
// `ssl` the session, for its verify result.
tls_failure read_tls_failure(SSL* ssl, unsigned long openssl_error);

// Sets `*requested` when the server asks this client for a certificate
// during the handshake of `ssl` (it must outlive the session).
void watch_certificate_request(SSL* ssl, bool* requested);

// Whether `ec`, the end of the first exchange after the handshake of
// `ssl` (before a byte of reply came), is most likely the server's refusal
// of this client's certificate: a TLS 1.3 session whose server asked for
// one (`requested`), ended by the server (end of stream, reset, broken
// pipe, a truncated TLS stream). Anything else (a Redis error, a timeout,
// a verdict on the replies) keeps its own meaning.
bool refused_certificate_likely(SSL* ssl, bool requested, const boost::system::error_code& ec);

// A connection lost at the first exchange after a handshake in which the
// server asked for a client certificate: the server refused the
// certificate, or its absence (a TLS 1.3 server checks it after the
// handshake, and closes at once; its alert may be lost with the close).
tls_failure refused_after_request(bool has_certificate);

// Whether `ec` came from the TLS layer (an OpenSSL error, or the TLS
// stream's own, such as stream_truncated).
bool is_tls_layer_error(const boost::system::error_code& ec);

}  // namespace dlock::redis::detail
