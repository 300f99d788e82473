#include "server/egress/session_ca.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace cabin::egress {

struct EvpKey {
  EVP_PKEY* p = nullptr;
  ~EvpKey() { EVP_PKEY_free(p); }
};
struct X509Cert {
  X509* p = nullptr;
  ~X509Cert() { X509_free(p); }
};

namespace {

Error openssl_error(const std::string& what) {
  const unsigned long e = ERR_get_error();
  char buf[256] = "";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return make_error(Errc::kInternal, "tls", what + (e ? std::string(": ") + buf : ""));
}

Result<void> set_serial(X509* x) {
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return openssl_error("RAND_bytes");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  if (!bn) return openssl_error("BN_bin2bn");
  const bool ok = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != nullptr;
  BN_free(bn);
  if (!ok) return openssl_error("BN_to_ASN1_INTEGER");
  return {};
}

Result<void> add_extensions(X509* issuer, X509* subject,
                            std::initializer_list<std::pair<int, std::string>> exts) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, subject, nullptr, nullptr, 0);
  for (const auto& [nid, value] : exts) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    if (!ext) return openssl_error("building a certificate extension");
    const int ok = X509_add_ext(subject, ext, -1);
    X509_EXTENSION_free(ext);
    if (!ok) return openssl_error("X509_add_ext");
  }
  return {};
}

void set_name(X509_NAME* name, const std::string& cn) {
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("Cabin"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
}

// Offers HTTP/1.1 whatever the client asked for: the proxy reads HTTP/1.1 only.
int select_http11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                  unsigned int inlen, void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* sel = nullptr;
  if (SSL_select_next_proto(&sel, outlen, kHttp11, sizeof kHttp11, in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;  // no ALPN: HTTP/1.1 by default
}

void tls12_or_newer(ssl::context& ctx) {
  boost::system::error_code ec;
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                      ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                  ec);
}

}  // namespace

SessionCa::~SessionCa() = default;

Result<std::shared_ptr<SessionCa>> SessionCa::create(const std::string& session_id, int days) {
  std::shared_ptr<SessionCa> ca(new SessionCa());
  ca->key_ = std::make_unique<EvpKey>();
  ca->cert_ = std::make_unique<X509Cert>();
  ca->key_->p = EVP_EC_gen("P-256");
  if (!ca->key_->p) return openssl_error("generating the session CA's key");
  X509* x = ca->cert_->p = X509_new();
  if (!x) return openssl_error("X509_new");
  X509_set_version(x, 2);
  if (auto r = set_serial(x); !r) return r.error();
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(days) * 24 * 3600);
  X509_set_pubkey(x, ca->key_->p);
  set_name(X509_get_subject_name(x), "Cabin session " + session_id);
  X509_set_issuer_name(x, X509_get_subject_name(x));
  if (auto r = add_extensions(x, x,
                              {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                               {NID_key_usage, "critical,keyCertSign,cRLSign"},
                               {NID_subject_key_identifier, "hash"}});
      !r) {
    return r.error();
  }
  if (X509_sign(x, ca->key_->p, EVP_sha256()) == 0) return openssl_error("signing the session CA");
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio || PEM_write_bio_X509(bio, x) != 1) {
    BIO_free(bio);
    return openssl_error("writing the session CA");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  ca->cert_pem_.assign(data, static_cast<size_t>(n));
  BIO_free(bio);
  return ca;
}

Result<std::string> SessionCa::key_pem() const {
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio || PEM_write_bio_PrivateKey(bio, key_->p, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    BIO_free(bio);
    return openssl_error("writing the session CA's key");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  return pem;
}

Result<std::shared_ptr<SessionCa>> SessionCa::load(const std::string& cert_pem,
                                                   const std::string& key_pem) {
  std::shared_ptr<SessionCa> ca(new SessionCa());
  ca->key_ = std::make_unique<EvpKey>();
  ca->cert_ = std::make_unique<X509Cert>();
  BIO* kb = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  ca->key_->p = kb ? PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(kb);
  if (!ca->key_->p) return openssl_error("reading the session CA's key");
  BIO* cb = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  ca->cert_->p = cb ? PEM_read_bio_X509(cb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(cb);
  if (!ca->cert_->p) return openssl_error("reading the session CA's certificate");
  if (X509_check_private_key(ca->cert_->p, ca->key_->p) != 1)
    return openssl_error("the session CA's key does not match its certificate");
  ca->cert_pem_ = cert_pem;
  return ca;
}

std::shared_ptr<SessionCa> SessionCa::share() const {
  std::shared_ptr<SessionCa> ca(new SessionCa());
  ca->key_ = std::make_unique<EvpKey>();
  ca->cert_ = std::make_unique<X509Cert>();
  EVP_PKEY_up_ref(key_->p);
  ca->key_->p = key_->p;
  X509_up_ref(cert_->p);
  ca->cert_->p = cert_->p;
  ca->cert_pem_ = cert_pem_;
  return ca;
}

Result<std::shared_ptr<ssl::context>> SessionCa::server_context(const std::string& host) {
  if (auto it = leaves_.find(host); it != leaves_.end()) return it->second;
  if (leaves_.size() >= kMaxLeavesPerSession) leaves_.erase(leaves_.begin());
  // A key per leaf: a TLS key that leaks (a side channel in the serving path) is one host's
  // certificate for a week, not the CA every copy of the session trusts.
  EvpKey leaf_key;
  leaf_key.p = EVP_EC_gen("P-256");
  if (!leaf_key.p) return openssl_error("generating a leaf's key");
  X509Cert leaf;
  X509* x = leaf.p = X509_new();
  if (!x) return openssl_error("X509_new");
  X509_set_version(x, 2);
  if (auto r = set_serial(x); !r) return r.error();
  // Browsers refuse leaves that last longer than 398 days; a week outlives any session here.
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 7L * 24 * 3600);
  X509_set_pubkey(x, leaf_key.p);
  set_name(X509_get_subject_name(x), host.size() <= 64 ? host : "cabin");
  X509_set_issuer_name(x, X509_get_subject_name(cert_->p));
  if (auto r = add_extensions(cert_->p, x,
                              {{NID_subject_alt_name, "DNS:" + host},
                               {NID_basic_constraints, "critical,CA:FALSE"},
                               {NID_key_usage, "critical,digitalSignature"},
                               {NID_ext_key_usage, "serverAuth"},
                               {NID_authority_key_identifier, "keyid"}});
      !r) {
    return r.error();
  }
  if (X509_sign(x, key_->p, EVP_sha256()) == 0) return openssl_error("signing a leaf");

  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  tls12_or_newer(*ctx);
  SSL_CTX* native = ctx->native_handle();
  if (SSL_CTX_use_certificate(native, x) != 1 || SSL_CTX_use_PrivateKey(native, leaf_key.p) != 1) {
    return openssl_error("loading a leaf");
  }
  SSL_CTX_set_alpn_select_cb(native, select_http11, nullptr);
  leaves_[host] = ctx;
  return ctx;
}

Result<std::shared_ptr<ssl::context>> upstream_tls_context(
    const std::filesystem::path& extra_ca_file) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  tls12_or_newer(*ctx);
  boost::system::error_code ec;
  ctx->set_default_verify_paths(ec);
  if (ec) return make_error(Errc::kInternal, "tls", "the system's roots: " + ec.message());
  if (!extra_ca_file.empty()) {
    ctx->load_verify_file(extra_ca_file.string(), ec);
    if (ec) {
      return make_error(Errc::kInvalidArgument, "tls",
                        "--extra-ca-file " + extra_ca_file.string() + ": " + ec.message());
    }
  }
  ctx->set_verify_mode(ssl::verify_peer);
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx->native_handle(), kHttp11, sizeof kHttp11);
  return ctx;
}

Result<std::string> read_ca_pem(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::kInvalidArgument, "tls", "cannot read " + file.string());
  std::ostringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  BIO* bio = BIO_new_mem_buf(all.data(), static_cast<int>(all.size()));
  if (!bio) return openssl_error("BIO_new_mem_buf");
  std::string out;
  size_t count = 0;
  for (;;) {
    X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (!x) break;
    ++count;
    BIO* w = BIO_new(BIO_s_mem());
    if (w && PEM_write_bio_X509(w, x) == 1) {
      char* data = nullptr;
      const long n = BIO_get_mem_data(w, &data);
      out.append(data, static_cast<size_t>(n));
    }
    BIO_free(w);
    X509_free(x);
  }
  BIO_free(bio);
  ERR_clear_error();  // the end of the file reads as an error
  if (count == 0) {
    return make_error(Errc::kInvalidArgument, "tls", file.string() + " holds no PEM certificate");
  }
  return out;
}

}  // namespace cabin::egress
