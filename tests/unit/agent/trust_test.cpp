// The sandbox's trust stores: the bundle and the variables for commands, and Chromium's NSS
// database, made with the real certutil.
#include "vm-images/agent/trust.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace cabin::agent;
namespace fs = std::filesystem;

namespace {

// Two throwaway certificates, made by openssl as a test would get them from an operator.
std::string make_certificates(const fs::path& dir) {
  std::string all;
  for (const char* cn : {"one", "two"}) {
    const fs::path key = dir / (std::string(cn) + ".key"), crt = dir / (std::string(cn) + ".crt");
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-subj /CN=" +
        std::string(cn) + " -days 1 -keyout " + key.string() + " -out " + crt.string() +
        " 2>/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream in(crt);
    std::stringstream text;
    text << in.rdbuf();
    all += text.str();
  }
  return all;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("split_pem_certificates: each block, in order, nothing else") {
  const std::string a = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----";
  const std::string b = "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----";
  auto out =
      split_pem_certificates("junk\n" + a + "\nmore\n" + b + "\n-----BEGIN CERTIFICATE-----");
  REQUIRE(out.size() == 2);
  CHECK(out[0] == a + "\n");
  CHECK(out[1] == b + "\n");
  CHECK(split_pem_certificates("").empty());
}

TEST_CASE("install_trusted_certificates: a bundle for commands, an NSS database for Chromium") {
  const fs::path home = fs::temp_directory_path() / ("cabin-trust-" + std::to_string(::getpid()));
  fs::remove_all(home);
  fs::create_directories(home);
  const std::string pem = make_certificates(home);
  const fs::path system = home / "system.pem";
  std::ofstream(system) << "SYSTEM ROOTS\n";
  TrustPaths paths;
  paths.system_bundle = system.string();
  std::string warning;
  auto vars = install_trusted_certificates(home.string(), pem, paths, &warning);
  REQUIRE(vars);
  CHECK(warning.empty());
  const std::string bundle = (home / ".cabin/ca-bundle.pem").string();
  CHECK(read_all(bundle) == "SYSTEM ROOTS\n" + pem);
  CHECK(read_all(home / ".cabin/trusted.pem") == pem);
  bool saw_curl = false;
  for (const auto& [k, v] : *vars) {
    if (k == "CURL_CA_BUNDLE") saw_curl = v == bundle;
  }
  CHECK(saw_curl);
  // Both are in the database as trusted CAs.
  const std::string list =
      "certutil -L -d sql:" + (home / ".pki/nssdb").string() + " > " + (home / "list.txt").string();
  REQUIRE(std::system(list.c_str()) == 0);
  const std::string listed = read_all(home / "list.txt");
  CHECK(listed.find("cabin-0") != std::string::npos);
  CHECK(listed.find("cabin-1") != std::string::npos);
  CHECK(listed.find("C,,") != std::string::npos);

  // Without certutil the commands still get their bundle; the warning says what Chromium lacks.
  paths.certutil = "/nonexistent/certutil";
  warning.clear();
  auto again = install_trusted_certificates((home / "b").string(), pem, paths, &warning);
  REQUIRE(again);
  CHECK(warning.find("libnss3-tools") != std::string::npos);
  CHECK_FALSE(install_trusted_certificates(home.string(), "no certificate", paths));
  fs::remove_all(home);
}
