// The TLS of the secret-injecting path. Each session has a CA of its own (EC P-256), made by
// cabind when the session starts; its key never leaves cabind, and only that session's sandbox
// trusts its certificate. For a host bound to a secret the proxy ends the sandbox's TLS with a
// leaf this CA signs, and opens its own TLS to the real host, verified against the system's
// roots and the operator's extra CA.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "common/result.h"

namespace cabin::egress {

namespace ssl = boost::asio::ssl;

struct EvpKey;  // session_ca.cpp
struct X509Cert;

class SessionCa {
 public:
  // A fresh CA named after the session; its certificate lasts `days`.
  static Result<std::shared_ptr<SessionCa>> create(const std::string& session_id, int days = 30);
  ~SessionCa();

  // The same CA again, from certificate_pem() and key_pem(): a restarted cabind adopting the
  // session keeps the CA its sandbox trusts.
  static Result<std::shared_ptr<SessionCa>> load(const std::string& cert_pem,
                                                 const std::string& key_pem);

  // The same CA with a leaf cache of its own: each copy of a template machine (whose browser
  // trusts the template's CA) signs its leaves apart, so that no session's hosts evict another's.
  std::shared_ptr<SessionCa> share() const;

  const std::string& certificate_pem() const { return cert_pem_; }
  // The key, for the session's handoff (kept only in cabind's private store).
  Result<std::string> key_pem() const;
  // A server context whose certificate names `host` (a canonical name), with a key of its own,
  // made on first use and kept; only HTTP/1.1 is offered, so the proxy can read the requests.
  Result<std::shared_ptr<ssl::context>> server_context(const std::string& host);

 private:
  SessionCa() = default;
  std::unique_ptr<EvpKey> key_;  // signs the leaves, never serves TLS itself
  std::unique_ptr<X509Cert> cert_;
  std::string cert_pem_;
  std::map<std::string, std::shared_ptr<ssl::context>> leaves_;
};

inline constexpr size_t kMaxLeavesPerSession = 256;

// The proxy's client context for the real hosts: TLS 1.2 or newer, the peer verified against the
// system's roots and `extra_ca_file` (if not empty), HTTP/1.1 offered by ALPN.
Result<std::shared_ptr<ssl::context>> upstream_tls_context(
    const std::filesystem::path& extra_ca_file);

// The certificates of a PEM file, as PEM text (for the sandboxes' trust stores); an error when it
// holds none or one that does not parse.
Result<std::string> read_ca_pem(const std::filesystem::path& file);

}  // namespace cabin::egress
