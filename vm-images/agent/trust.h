// The certificates a sandbox trusts besides the system's roots (the session's CA, the operator's
// extra CA), put where its programs look: an NSS database in HOME/.pki/nssdb for Chromium, and a
// bundle of the system's roots and these that commands find through the usual variables.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace cabin::agent {

// The PEM blocks of `pem`, each "-----BEGIN CERTIFICATE-----" to its END line, in order.
std::vector<std::string> split_pem_certificates(std::string_view pem);

struct TrustPaths {
  std::string certutil = "/usr/bin/certutil";
  std::string system_bundle = "/etc/ssl/certs/ca-certificates.crt";
};

// Writes HOME/.cabin/trusted.pem (these) and HOME/.cabin/ca-bundle.pem (the system's and these),
// and adds each certificate to HOME/.pki/nssdb as a trusted CA. Returns the variables that point
// commands at them (SSL_CERT_FILE, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS). The
// NSS step failing (no certutil) is not an error: commands still trust them, and `warning` says
// what Chromium lacks.
Result<std::vector<std::pair<std::string, std::string>>> install_trusted_certificates(
    const std::string& home, std::string_view pem, const TrustPaths& paths = {},
    std::string* warning = nullptr);

}  // namespace cabin::agent
