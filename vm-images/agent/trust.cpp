#include "vm-images/agent/trust.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cabin::agent {

namespace fs = std::filesystem;

namespace {

Error trust_error(const std::string& what) {
  return make_error(Errc::kInternal, "trust_failed", what);
}

Result<void> write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return trust_error("cannot write " + path.string());
  return {};
}

// Runs a program to its end, with no descriptor of ours but stdio and a minimal environment.
// Not through the exec filter helper: it runs and ends before the agent answers any request, so
// no exec'd command exists yet that could reach into it.
Result<void> run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/bin:/bin";
  char* envp[] = {path_env, nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return trust_error(argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return trust_error(argv[0] + " " + argv[1] + " failed (status " + std::to_string(status) + ")");
  }
  return {};
}

}  // namespace

std::vector<std::string> split_pem_certificates(std::string_view pem) {
  static constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
  static constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t begin = pem.find(kBegin, at);
    if (begin == std::string_view::npos) break;
    const size_t end = pem.find(kEnd, begin + kBegin.size());
    if (end == std::string_view::npos) break;
    out.emplace_back(pem.substr(begin, end + kEnd.size() - begin));
    out.back() += '\n';
    at = end + kEnd.size();
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> install_trusted_certificates(
    const std::string& home, std::string_view pem, const TrustPaths& paths, std::string* warning) {
  const auto certs = split_pem_certificates(pem);
  if (certs.empty()) return trust_error("no PEM certificate to trust");
  std::error_code ec;
  const fs::path dir = fs::path(home) / ".cabin";
  const fs::path nssdb = fs::path(home) / ".pki" / "nssdb";
  fs::create_directories(dir, ec);
  fs::create_directories(nssdb, ec);
  if (ec) return trust_error("cannot make " + nssdb.string() + ": " + ec.message());

  std::string mine;
  for (const auto& c : certs) mine += c;
  const fs::path trusted = dir / "trusted.pem";
  if (auto r = write_file(trusted, mine); !r) return r.error();
  std::ifstream system(paths.system_bundle, std::ios::binary);
  std::stringstream roots;
  if (system) roots << system.rdbuf();
  std::string bundle = roots.str();
  if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
  const fs::path bundle_path = dir / "ca-bundle.pem";
  if (auto r = write_file(bundle_path, bundle + mine); !r) return r.error();

  // Chromium on Linux reads the user's NSS database for locally trusted roots.
  auto nss = [&]() -> Result<void> {
    if (!fs::exists(paths.certutil, ec)) {
      return trust_error(paths.certutil + " is missing (Debian: libnss3-tools)");
    }
    const std::string db = "sql:" + nssdb.string();
    if (!fs::exists(nssdb / "cert9.db", ec)) {
      if (auto r = run({paths.certutil, "-N", "-d", db, "--empty-password"}); !r) return r;
    }
    for (size_t i = 0; i < certs.size(); ++i) {
      const fs::path one = dir / ("trusted-" + std::to_string(i) + ".pem");
      if (auto r = write_file(one, certs[i]); !r) return r;
      auto r = run({paths.certutil, "-A", "-d", db, "-n", "cabin-" + std::to_string(i), "-t", "C,,",
                    "-a", "-i", one.string()});
      fs::remove(one, ec);
      if (!r) return r;
    }
    return {};
  };
  if (auto r = nss(); !r && warning) {
    *warning = "Chromium will not trust them: " + r.error().message;
  }
  return std::vector<std::pair<std::string, std::string>>{
      {"SSL_CERT_FILE", bundle_path.string()},
      {"CURL_CA_BUNDLE", bundle_path.string()},
      {"REQUESTS_CA_BUNDLE", bundle_path.string()},
      {"NODE_EXTRA_CA_CERTS", trusted.string()},
  };
}

}  // namespace cabin::agent
