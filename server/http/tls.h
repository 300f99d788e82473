// TLS for the listener: the server context from a PEM pair, and a self-signed pair for development.
#pragma once

#include <boost/asio/ssl/context.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace cabin::http_api {

// TLS 1.2 and 1.3 only, the key must match the certificate.
Result<std::shared_ptr<boost::asio::ssl::context>> make_server_tls_context(
    const std::filesystem::path& cert_pem, const std::filesystem::path& key_pem);

struct TlsPair {
  std::filesystem::path cert;
  std::filesystem::path key;
  bool generated = false;
};

// Returns dir/self-signed.{crt,key}, generating them (EC P-256, a year, SHA-256) when missing.
// names: DNS names ("*.preview.example" allowed) and IP literals for the subjectAltName;
// localhost, 127.0.0.1 and ::1 are always included.
Result<TlsPair> ensure_self_signed(const std::filesystem::path& dir,
                                   const std::vector<std::string>& names);

}  // namespace cabin::http_api
