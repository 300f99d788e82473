// Secrets on their way out (placeholders found, replaced and encoded) and the session's CA.
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "server/egress/secrets.h"
#include "server/egress/session_ca.h"

using namespace cabin::egress;

namespace {

Policy secrets_policy() {
  auto p = parse_policy(nlohmann::json::parse(R"({"mode": "allowlist",
      "allow": [{"host": "*.example.test"}],
      "secrets": [{"name": "a", "value": "v a+b", "hosts": ["api.example.test"],
                   "substitute": ["target", "body"]},
                  {"name": "b", "value": "vb", "hosts": ["*.other.test"], "ports": [8443, 443],
                   "header": "X-Key", "format": "k={value};{value}"}]})"));
  REQUIRE(p);
  return *p;
}

Host name_host(const char* n) { return *canonical_host(n); }

X509* pem_certificate(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return x;
}

}  // namespace

TEST_CASE("secrets: which hosts and ports a secret is bound to") {
  const Policy p = secrets_policy();
  CHECK(bound_to(p.secrets[0], name_host("api.example.test"), 443));
  CHECK(bound_to(p.secrets[0], name_host("API.example.test."), 443));
  CHECK_FALSE(bound_to(p.secrets[0], name_host("www.example.test"), 443));
  CHECK(bound_to(p.secrets[1], name_host("x.y.other.test"), 8443));
  CHECK_FALSE(bound_to(p.secrets[1], name_host("other.test"), 443));
  CHECK_FALSE(bound_to(p.secrets[0], name_host("127.0.0.1"), 443));
  // 443 unless the secret names its ports: on another port the host is only tunnelled.
  CHECK(p.secrets[0].ports == std::vector<uint16_t>{443});
  CHECK(p.secrets[1].ports == std::vector<uint16_t>{443, 8443});
  CHECK_FALSE(bound_to(p.secrets[0], name_host("api.example.test"), 8443));
  CHECK(bound_to(p.secrets[0], name_host("api.example.test")));
  CHECK(any_secret_bound(p, name_host("api.example.test"), 443));
  CHECK_FALSE(any_secret_bound(p, name_host("api.example.test"), 80));
  CHECK_FALSE(any_secret_bound(p, name_host("www.example.test"), 443));
  CHECK(secret_bound(p, "b", name_host("a.other.test")));
  CHECK_FALSE(secret_bound(p, "a", name_host("a.other.test")));
  CHECK(any_secret_in_body(p, name_host("api.example.test"), 443));
  CHECK_FALSE(any_secret_in_body(p, name_host("a.other.test"), 443));
}

TEST_CASE("secrets: placeholders found, and replaced as the body's type needs") {
  const Policy p = secrets_policy();
  const std::string pa = p.secrets[0].placeholder, pb = p.secrets[1].placeholder;
  REQUIRE(pa.rfind("cabin_secret_", 0) == 0);
  REQUIRE(pa.size() == 13 + 32);
  const Host api = name_host("api.example.test");
  CHECK(placeholder_in(p, api, 443, "x" + pa, true).empty());
  CHECK(placeholder_in(p, api, 443, "x" + pa, false) == "a");
  CHECK(placeholder_in(p, api, 8443, "x" + pa, true) == "a");  // not bound on that port
  CHECK(placeholder_in(p, api, 443, pb, true) == "b");
  CHECK(placeholder_in(p, api, 443, "cabin_secret_", false).empty());

  std::vector<std::string> used;
  const Part body{Part::kBody, {}};
  std::string form = "u=1&p=" + pa + "&q=" + pa;
  replace_placeholders(p, api, 443, body, form, BodyKind::kUrlEncoded, used);
  CHECK(form == "u=1&p=v%20a%2Bb&q=v%20a%2Bb");
  CHECK(used == std::vector<std::string>{"a"});
  std::string json = "{\"k\":\"" + pa + "\",\"o\":\"" + pb + "\"}";
  replace_placeholders(p, api, 443, body, json, BodyKind::kJson, used);
  CHECK(json == "{\"k\":\"v a+b\",\"o\":\"" + pb + "\"}");  // b is not bound here: left
  CHECK(used.size() == 1);
  std::string elsewhere = pa;
  replace_placeholders(p, api, 8443, body, elsewhere, BodyKind::kText, used);
  CHECK(elsewhere == pa);

  CHECK(body_kind("application/x-www-form-urlencoded; charset=utf-8") == BodyKind::kUrlEncoded);
  CHECK(body_kind("Application/JSON") == BodyKind::kJson);
  CHECK(body_kind("application/vnd.api+json") == BodyKind::kJson);
  CHECK(body_kind("multipart/form-data; boundary=x") == BodyKind::kText);
  CHECK(body_kind("text/plain") == BodyKind::kText);
  CHECK(body_kind("image/png") == BodyKind::kOpaque);
  CHECK(body_kind("") == BodyKind::kOpaque);
  CHECK(header_value(p.secrets[1]) == "k=vb;vb");
  CHECK(header_value(p.secrets[0]) == "v a+b");
}

TEST_CASE(
    "secrets: a placeholder is replaced in its own header, and in target and body only "
    "where the secret says") {
  const Policy p = secrets_policy();
  const std::string pa = p.secrets[0].placeholder, pb = p.secrets[1].placeholder;
  const Host api = name_host("api.example.test"), other = name_host("x.other.test");
  std::vector<std::string> used;
  // b: its header only.
  std::string text = pb;
  replace_placeholders(p, other, 443, {Part::kTarget, {}}, text, BodyKind::kUrlEncoded, used);
  CHECK(text == pb);
  replace_placeholders(p, other, 443, {Part::kBody, {}}, text, BodyKind::kText, used);
  CHECK(text == pb);
  replace_placeholders(p, other, 443, {Part::kField, "Cookie"}, text, BodyKind::kText, used);
  CHECK(text == pb);
  replace_placeholders(p, other, 443, {Part::kField, "x-key"}, text, BodyKind::kText, used);
  CHECK(text == "vb");
  // a: its header, the target and the body.
  text = pa;
  replace_placeholders(p, api, 443, {Part::kTarget, {}}, text, BodyKind::kUrlEncoded, used);
  CHECK(text == "v%20a%2Bb");

  boost::beast::http::fields fields;
  fields.set("X-Key", "k " + pb);
  CHECK(misplaced_placeholder(p, other, 443, fields, "/", "").empty());
  CHECK(misplaced_placeholder(p, other, 443, fields, "/?q=" + pb, "") ==
        "the request's target carries the placeholder of secret b: it is put only into its "
        "header X-Key unless its \"substitute\" lists \"target\"");
  CHECK(misplaced_placeholder(p, other, 443, fields, "/", "x=" + pb).find("lists \"body\"") !=
        std::string::npos);
  fields.set("Cookie", "c=" + pb);
  CHECK(misplaced_placeholder(p, other, 443, fields, "/", "") ==
        "the request's field Cookie carries the placeholder of secret b: it is put only into its "
        "header X-Key");
  // a allows its target and body; another field is still refused.
  boost::beast::http::fields none;
  CHECK(misplaced_placeholder(p, api, 443, none, "/?q=" + pa, "x=" + pa).empty());
  none.set("X-Other", pa);
  CHECK_FALSE(misplaced_placeholder(p, api, 443, none, "/", "").empty());
}

TEST_CASE("secrets: ports and substitute parsed, answered, and refused when wrong") {
  const Policy p = secrets_policy();
  const auto j = policy_json(p);
  CHECK(j["secrets"][0]["ports"] == nlohmann::json::array({443}));
  CHECK(j["secrets"][0]["substitute"] == nlohmann::json::array({"target", "body"}));
  CHECK(j["secrets"][1]["substitute"] == nlohmann::json::array());
  auto bad = [](const char* secret) {
    return parse_policy(nlohmann::json::parse(std::string(R"({"mode": "allowlist", "secrets": [)") +
                                              secret + "]}"));
  };
  auto r = bad(R"({"name": "a", "value": "v", "hosts": ["a.test"], "substitute": ["header"]})");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("network.secrets[0].substitute[0]") != std::string::npos);
  CHECK_FALSE(bad(R"({"name": "a", "value": "v", "hosts": ["a.test"], "substitute": "body"})"));
  CHECK_FALSE(bad(R"({"name": "a", "value": "v", "hosts": ["a.test"], "ports": [0]})"));
  CHECK_FALSE(bad(R"({"name": "a", "value": "v", "hosts": ["a.test"], "ports": []})"));
  CHECK(bad(R"({"name": "a", "value": "v", "hosts": ["a.test"], "ports": [9443]})"));
}

TEST_CASE("session CA: leaves for a host verify against it, and only for that host") {
  auto ca = SessionCa::create("ses_x");
  REQUIRE(ca);
  const std::string& pem = (*ca)->certificate_pem();
  REQUIRE(pem.rfind("-----BEGIN CERTIFICATE-----", 0) == 0);
  auto ctx = (*ca)->server_context("site.test");
  REQUIRE(ctx);
  auto again = (*ca)->server_context("site.test");
  REQUIRE(again);
  CHECK(ctx->get() == again->get());  // made once

  X509* root = pem_certificate(pem);
  REQUIRE(root);
  X509* leaf = SSL_CTX_get0_certificate((*ctx)->native_handle());
  REQUIRE(leaf);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, root);
  X509_STORE_CTX* vctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(vctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(vctx);
  X509_VERIFY_PARAM_set1_host(param, "site.test", 0);
  X509_STORE_CTX_set_purpose(vctx, X509_PURPOSE_SSL_SERVER);
  CHECK(X509_verify_cert(vctx) == 1);
  X509_STORE_CTX_cleanup(vctx);
  X509_STORE_CTX_init(vctx, store, leaf, nullptr);
  X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(vctx), "other.test", 0);
  CHECK(X509_verify_cert(vctx) != 1);
  X509_STORE_CTX_free(vctx);
  X509_STORE_free(store);
  // The leaf has a key of its own: the CA's never serves TLS.
  CHECK(EVP_PKEY_eq(X509_get0_pubkey(leaf), X509_get0_pubkey(root)) != 1);
  auto other_leaf = (*ca)->server_context("other.test");
  REQUIRE(other_leaf);
  CHECK(EVP_PKEY_eq(X509_get0_pubkey(SSL_CTX_get0_certificate((*other_leaf)->native_handle())),
                    X509_get0_pubkey(leaf)) != 1);
  X509_free(root);

  // A copy's share of the CA: the same certificate, leaves of its own.
  auto shared = (*ca)->share();
  CHECK(shared->certificate_pem() == pem);
  auto shared_leaf = shared->server_context("site.test");
  REQUIRE(shared_leaf);
  CHECK(shared_leaf->get() != ctx->get());

  // Another session's CA does not vouch for this one's leaves.
  auto other = SessionCa::create("ses_y");
  REQUIRE(other);
  CHECK((*other)->certificate_pem() != pem);
}

TEST_CASE("read_ca_pem: certificates only") {
  auto ca = SessionCa::create("ses_z");
  REQUIRE(ca);
  const auto dir = std::filesystem::temp_directory_path();
  const auto good = dir / ("cabin-ca-good-" + std::to_string(::getpid()) + ".pem");
  const auto bad = dir / ("cabin-ca-bad-" + std::to_string(::getpid()) + ".pem");
  std::ofstream(good) << "junk\n" << (*ca)->certificate_pem();
  std::ofstream(bad) << "not a certificate\n";
  auto r = read_ca_pem(good);
  REQUIRE(r);
  CHECK(*r == (*ca)->certificate_pem());
  CHECK_FALSE(read_ca_pem(bad));
  CHECK_FALSE(read_ca_pem(dir / "cabin-no-such-file.pem"));
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

TEST_CASE("media types compare without regard to case, reading nothing past them") {
  // Each on a heap buffer of its own exact size: a compare that reads one byte further is
  // caught by AddressSanitizer (Boost 1.74's beast::iequals did, for strings differing in case).
  for (const auto& [type, kind] :
       std::vector<std::pair<std::string, BodyKind>>{
           {"aPplication/x-www-form-urlencoded", BodyKind::kUrlEncoded},
           {"Application/JSON; charset=utf-8", BodyKind::kJson},
           {"application/ld+JSON", BodyKind::kJson},
           {"TEXT/plain", BodyKind::kText},
           {"image/PNG", BodyKind::kOpaque}}) {
    std::unique_ptr<char[]> exact(new char[type.size()]);
    std::memcpy(exact.get(), type.data(), type.size());
    CHECK(body_kind(std::string_view(exact.get(), type.size())) == kind);
  }
}
