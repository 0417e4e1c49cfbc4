// TLS settings as OpenSSL objects, and TLS failures as dlock's errors.
#include "tls.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <dlock/error.hpp>

namespace dlock::redis::detail {

namespace asio = boost::asio;

namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw std::system_error(make_error_code(error::invalid_argument), "TLS settings: " + what);
}

// OpenSSL's reasons for the errors queued since the call that failed.
std::string openssl_reasons() {
  std::string out;
  while (unsigned long e = ::ERR_get_error()) {
    const char* r = ::ERR_reason_error_string(e);
    if (!out.empty()) out += "; ";
    out += r ? r : "error " + std::to_string(e);
  }
  return out.empty() ? "no reason given" : out;
}

// A readable file (or, with `folder`, a folder), or a message that says why not.
void check_readable(const std::string& path, const char* field, bool folder = false) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0)
    refuse(std::string(field) + " \"" + path + "\": " + std::strerror(errno));
  if (folder != S_ISDIR(st.st_mode))
    refuse(std::string(field) + " \"" + path + "\" is " + (folder ? "not a folder" : "a folder"));
}

// A certificate failure the verify result names: which of dlock's errors.
error tls_error_of_verify(long result) {
  switch (result) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
    case X509_V_ERR_EMAIL_MISMATCH: return error::tls_hostname_mismatch;
    default: return error::tls_certificate_rejected;
  }
}

// The server's alert says it refused this client's certificate (or its
// absence).
bool refuses_client_certificate(int reason) {
  switch (reason) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED: return true;
    default: return false;
  }
}

}  // namespace

std::shared_ptr<asio::ssl::context> make_tls_context(const tls_settings& s) {
  if (s.cert_file.empty() != s.key_file.empty())
    refuse("cert_file and key_file go together (a client certificate and its key)");
  if (!s.ca_file.empty()) check_readable(s.ca_file, "ca_file");
  if (!s.ca_dir.empty()) check_readable(s.ca_dir, "ca_dir", true);
  if (!s.cert_file.empty()) check_readable(s.cert_file, "cert_file");
  if (!s.key_file.empty()) check_readable(s.key_file, "key_file");

  ::ERR_clear_error();
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  if (::SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1)
    refuse("cannot require TLS 1.2 or later: " + openssl_reasons());
  if (!s.ca_file.empty() || !s.ca_dir.empty()) {
    if (::SSL_CTX_load_verify_locations(native, s.ca_file.empty() ? nullptr : s.ca_file.c_str(),
                                        s.ca_dir.empty() ? nullptr : s.ca_dir.c_str()) != 1)
      refuse("cannot load the CA certificates of " + (s.ca_file.empty() ? "ca_dir \"" + s.ca_dir : "ca_file \"" + s.ca_file) +
             "\": " + openssl_reasons());
  } else if (::SSL_CTX_set_default_verify_paths(native) != 1) {
    refuse("cannot load the system's CA certificates: " + openssl_reasons());
  }
  // An encrypted key would make OpenSSL ask for its passphrase on the
  // terminal, inside a constructor: refuse it instead.
  ::SSL_CTX_set_default_passwd_cb(native, [](char*, int, int, void*) { return 0; });
  if (!s.cert_file.empty()) {
    if (::SSL_CTX_use_certificate_chain_file(native, s.cert_file.c_str()) != 1)
      refuse("cannot use cert_file \"" + s.cert_file + "\": " + openssl_reasons());
    if (::SSL_CTX_use_PrivateKey_file(native, s.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      refuse("cannot use key_file \"" + s.key_file + "\": " + openssl_reasons());
    // (A key that is not the certificate's fails above, "key values mismatch".)
    if (::SSL_CTX_check_private_key(native) != 1)
      refuse("key_file \"" + s.key_file + "\" is not the key of cert_file \"" + s.cert_file + "\": " +
             openssl_reasons());
  }
  ::SSL_CTX_set_verify(native, s.insecure_no_verify_for_tests_only ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);
  return ctx;
}

namespace {

bool same(const tls_settings& a, const tls_settings& b) {
  return a.ca_file == b.ca_file && a.ca_dir == b.ca_dir && a.cert_file == b.cert_file && a.key_file == b.key_file &&
         a.server_name == b.server_name && a.insecure_no_verify_for_tests_only == b.insecure_no_verify_for_tests_only;
}

}  // namespace

std::shared_ptr<const tls_client> shared_tls_client(const std::optional<tls_settings>& settings) {
  if (!settings) return nullptr;
  static std::mutex m;
  static std::vector<std::weak_ptr<const tls_client>> made;
  std::lock_guard g(m);
  std::erase_if(made, [](const auto& w) { return w.expired(); });
  for (const auto& w : made)
    if (auto c = w.lock(); c && same(c->settings, *settings)) return c;
  auto c = std::make_shared<const tls_client>(tls_client{*settings, make_tls_context(*settings)});
  made.push_back(c);
  return c;
}

std::shared_ptr<const tls_client> tls_client_for(const config& cfg) {
  if (cfg.tls && cfg.kind == config::transport::unix_socket && !cfg.source)
    refuse("TLS over a unix socket is not supported (use a redis:// or unix:// URL without TLS)");
  return shared_tls_client(cfg.tls);
}

bool prepare_tls_session(SSL* ssl, const tls_settings& s, const std::string& host) {
  const std::string& name = s.server_name.empty() ? host : s.server_name;
  boost::system::error_code not_ip;
  asio::ip::make_address(name, not_ip);
  if (not_ip) {
    // SNI carries host names only (RFC 6066), never an address.
    if (::SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) return false;
    if (s.insecure_no_verify_for_tests_only) return true;
    return ::SSL_set1_host(ssl, name.c_str()) == 1;
  }
  if (s.insecure_no_verify_for_tests_only) return true;
  return ::X509_VERIFY_PARAM_set1_ip_asc(::SSL_get0_param(ssl), name.c_str()) == 1;
}

tls_failure read_tls_failure(SSL* ssl, unsigned long openssl_error) {
  // (With verification off, OpenSSL still records what it would have found.)
  const long verify =
      ssl && ::SSL_get_verify_mode(ssl) != SSL_VERIFY_NONE ? ::SSL_get_verify_result(ssl) : X509_V_OK;
  const int reason = ERR_GET_REASON(openssl_error);
  std::string why;
  if (openssl_error != 0) {
    const char* r = ::ERR_reason_error_string(openssl_error);
    why = r ? r : "OpenSSL error " + std::to_string(openssl_error);
  } else {
    why = "the connection ended during the TLS handshake";
  }
  if (verify != X509_V_OK) {
    why += std::string(": ") + ::X509_verify_cert_error_string(verify);
    return {boost::system::error_code(tls_error_of_verify(verify)), why};
  }
  if (openssl_error != 0 && refuses_client_certificate(reason))
    return {boost::system::error_code(error::tls_client_certificate_rejected), why};
  return {boost::system::error_code(error::tls_handshake_failed), why};
}

void watch_certificate_request(SSL* ssl, bool* requested) {
  *requested = false;
  ::SSL_set_cert_cb(
      ssl,
      [](SSL*, void* flag) {
        *static_cast<bool*>(flag) = true;
        return 1;  // go on, with the certificate the context has, if any
      },
      requested);
}

tls_failure refused_after_request(bool has_certificate) {
  return {error::tls_client_certificate_rejected,
          has_certificate ? "the server asked for this client's certificate, then closed the connection"
                          : "the server asked for a client certificate, this client has none (cert_file), and the "
                            "server closed the connection"};
}

bool refused_certificate_likely(SSL* ssl, bool requested, const boost::system::error_code& ec) {
  if (!requested || !ssl || ::SSL_version(ssl) != TLS1_3_VERSION) return false;
  namespace aerr = asio::error;
  return ec == aerr::eof || ec == aerr::connection_reset || ec == aerr::broken_pipe ||
         ec == asio::ssl::error::stream_truncated;
}

bool is_tls_layer_error(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() || ec.category() == asio::ssl::error::get_stream_category();
}

}  // namespace dlock::redis::detail
