#include "server/http/tls.h"

#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>

#include <cstdio>
#include <set>

namespace cabin::http_api {
namespace {

namespace fs = std::filesystem;

Error tls_error(const std::string& what) {
  unsigned long e = ERR_get_error();
  char buf[256] = "";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return make_error(Errc::kInternal, "tls", what + (e ? std::string(": ") + buf : ""));
}

struct PkeyFree { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
struct X509Free { void operator()(X509* p) const { X509_free(p); } };
struct FileClose { void operator()(FILE* f) const { std::fclose(f); } };

Result<void> write_pem(const fs::path& path, bool private_key, EVP_PKEY* key, X509* cert) {
  fs::path tmp = path.string() + ".tmp";
  std::unique_ptr<FILE, FileClose> f(std::fopen(tmp.c_str(), "wx"));
  if (!f) return make_error(Errc::kInternal, "tls", "cannot write " + tmp.string());
  std::error_code ec;
  fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, ec);
  int ok = private_key ? PEM_write_PrivateKey(f.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
                       : PEM_write_X509(f.get(), cert);
  if (!ok || std::fflush(f.get()) != 0) return tls_error("writing " + tmp.string());
  f.reset();
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::kInternal, "tls", "cannot write " + path.string());
  return {};
}

}  // namespace

Result<std::shared_ptr<boost::asio::ssl::context>> make_server_tls_context(
    const fs::path& cert_pem, const fs::path& key_pem) {
  namespace ssl = boost::asio::ssl;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use,
                   ec);
  ctx->use_certificate_chain_file(cert_pem.string(), ec);
  if (ec) {
    return make_error(Errc::kInvalidArgument, "tls",
                      "cannot load certificate " + cert_pem.string() + ": " + ec.message());
  }
  ctx->use_private_key_file(key_pem.string(), ssl::context::pem, ec);
  if (ec) {
    return make_error(Errc::kInvalidArgument, "tls",
                      "cannot load private key " + key_pem.string() + ": " + ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return tls_error("the private key does not match the certificate");
  }
  return ctx;
}

Result<TlsPair> ensure_self_signed(const fs::path& dir, const std::vector<std::string>& names) {
  TlsPair pair{dir / "self-signed.crt", dir / "self-signed.key", false};
  std::error_code ec;
  if (fs::exists(pair.cert, ec) && fs::exists(pair.key, ec)) return pair;
  fs::create_directories(dir, ec);
  fs::permissions(dir, fs::perms::owner_all, ec);

  std::unique_ptr<EVP_PKEY, PkeyFree> key(EVP_EC_gen("P-256"));
  if (!key) return tls_error("generating a key");
  std::unique_ptr<X509, X509Free> cert(X509_new());
  if (!cert) return tls_error("X509_new");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return tls_error("RAND_bytes");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 365L * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("Cabin development"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("cabind"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);

  std::set<std::string> all = {"DNS:localhost", "IP:127.0.0.1", "IP:::1"};
  for (const auto& n : names) {
    if (n.empty()) continue;
    boost::system::error_code aec;
    boost::asio::ip::make_address(n, aec);
    all.insert((aec ? "DNS:" : "IP:") + n);
  }
  std::string san;
  for (const auto& n : all) san += (san.empty() ? "" : ",") + n;
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, cert.get(), cert.get(), nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, san.c_str()},
                            std::pair{NID_ext_key_usage, "serverAuth"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
    if (!ext) return tls_error("building the certificate extensions");
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return tls_error("signing");
  if (auto r = write_pem(pair.key, true, key.get(), nullptr); !r) return r.error();
  if (auto r = write_pem(pair.cert, false, nullptr, cert.get()); !r) return r.error();
  pair.generated = true;
  return pair;
}

}  // namespace cabin::http_api
