#include "server/profiles/profile_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/bounded_json.h"
#include "common/crypto.h"
#include "common/json_fields.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/store/sqlite_stmt.h"

namespace cabin::profiles {
namespace {

Error not_found() { return api::errors::profile_not_found(); }

Error in_use(const std::string& session) {
  return make_error(Errc::kConflict, "profile_in_use",
                    "the profile is in use by session " + session + "; one session at a time");
}

bool printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
  });
}

bool sees(const std::string& owner, const ProfileRecord& r) {
  return owner == "admin" || r.owner == owner;
}

// `data` into `path` by a file beside it and a rename: a reader finds the old archive or the
// new one, never half of one.
Result<void> write_atomically(const std::filesystem::path& path, const std::string& data) {
  const auto tmp = path.string() + ".new";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(Errc::kInternal, "profile_io", tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      ::close(fd);
      return make_error(Errc::kInternal, "profile_io", tmp + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return make_error(Errc::kInternal, "profile_io", path.string() + ": " + std::strerror(errno));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<ProfileStore>> ProfileStore::open(const std::string& db_path,
                                                         std::filesystem::path dir,
                                                         std::string key, ArchiveLimits limits) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) return make_error(Errc::kInternal, "profile_io", dir.string() + ": " + ec.message());
  auto opened = store::open_database(db_path);
  if (!opened) return opened.error();
  sqlite3* db = *opened;
  std::unique_ptr<ProfileStore> s(new ProfileStore(db, std::move(dir), std::move(key), limits));
  sqlite3_busy_timeout(db, 2000);
  CABIN_TRY(store::exec_sql(
      db,
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
      "CREATE TABLE IF NOT EXISTS profiles ("
      " id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,"
      " created_at INTEGER NOT NULL, saved_at INTEGER NOT NULL DEFAULT 0,"
      " size_bytes INTEGER NOT NULL DEFAULT 0, in_use_by TEXT NOT NULL DEFAULT '');"));
  store::Stmt q(db,
                "SELECT id, owner, name, created_at, saved_at, size_bytes, in_use_by FROM profiles"
                " ORDER BY rowid");
  if (!q.ok()) return store::db_error(db, "prepare read profiles");
  while (q.step() == SQLITE_ROW) {
    ProfileRecord r;
    r.id = q.text(0);
    r.owner = q.text(1);
    r.name = q.text(2);
    r.created_at = q.integer(3);
    r.saved_at = q.integer(4);
    r.size_bytes = static_cast<uint64_t>(q.integer(5));
    r.in_use_by = q.text(6);
    s->order_[r.id] = s->next_++;
    s->profiles_.emplace(r.id, std::move(r));
  }
  s->bind_legacy_archives();
  return s;
}

std::string ProfileStore::seal_context(const std::string& id) { return "cabin profile " + id; }

void ProfileStore::bind_legacy_archives() {
  // Archives sealed before they were bound to their profile's id open without the context:
  // sealed again with it, once, so that none opens in another profile's place from now on.
  for (const auto& [id, r] : profiles_) {
    if (r.saved_at == 0) continue;
    std::ifstream in(archive_path(id), std::ios::binary);
    std::stringstream sealed;
    sealed << in.rdbuf();
    if (!in || open_sealed(key_, sealed.str(), seal_context(id))) continue;
    auto plain = open_sealed(key_, sealed.str());
    if (!plain) continue;  // not this server's: reading it says so
    if (auto bound = seal(key_, *plain, seal_context(id))) {
      (void)write_atomically(archive_path(id), *bound);
    }
  }
}

ProfileStore::~ProfileStore() { sqlite3_close(db_); }

Result<void> ProfileStore::save(const ProfileRecord& r) {
  store::Stmt q(db_,
                "INSERT OR REPLACE INTO profiles (id, owner, name, created_at, saved_at, size_bytes,"
                " in_use_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  q.bind(1, r.id).bind(2, r.owner).bind(3, r.name).bind(4, r.created_at).bind(5, r.saved_at);
  q.bind(6, static_cast<int64_t>(r.size_bytes)).bind(7, r.in_use_by);
  if (q.step() != SQLITE_DONE) return store::db_error(db_, "save profile");
  return {};
}

Result<ProfileRecord> ProfileStore::create(const std::string& owner, const std::string& name,
                                           int64_t now) {
  if (name.empty() || name.size() > kMaxProfileName || !printable(name)) {
    return invalid_field("name", "must be 1.." + std::to_string(kMaxProfileName) +
                                     " printable characters");
  }
  if (budget_of_) {
    const ProfileBudget b = budget_of_(owner);
    const auto [count, bytes] = held_by(owner, "");
    if (b.max_profiles > 0 && count >= b.max_profiles) {
      return api::errors::quota_profiles("this API key has its maximum of " +
                                         std::to_string(b.max_profiles) +
                                         " saved profiles (max_profiles): delete one first");
    }
    if (b.max_bytes > 0 && bytes >= b.max_bytes) {
      return api::errors::quota_profiles(
          "this API key's saved profiles take " + std::to_string(bytes >> 20) + " MiB, its " +
          std::to_string(b.max_bytes >> 20) + " (max_profiles_mb): delete one first");
    }
  }
  ProfileRecord r;
  r.id = api::new_profile_id();
  r.owner = owner;
  r.name = name;
  r.created_at = now;
  CABIN_TRY(save(r));
  order_[r.id] = next_++;
  profiles_[r.id] = r;
  return r;
}

std::pair<int, uint64_t> ProfileStore::held_by(const std::string& owner,
                                               const std::string& except) const {
  int count = 0;
  uint64_t bytes = 0;
  for (const auto& [id, r] : profiles_) {
    if (r.owner != owner) continue;
    ++count;
    if (id != except) bytes += r.size_bytes;
  }
  return {count, bytes};
}

std::optional<Error> ProfileStore::over_budget(const ProfileRecord& r, uint64_t size) const {
  if (!budget_of_) return std::nullopt;
  const ProfileBudget b = budget_of_(r.owner);
  const uint64_t others = held_by(r.owner, r.id).second;
  if (b.max_bytes == 0 || others + size <= b.max_bytes) return std::nullopt;
  return api::errors::quota_profiles("saving profile " + r.id + " (" + std::to_string(size >> 20) +
                                     " MiB) would take this API " + "key's saved profiles past " +
                                     std::to_string(b.max_bytes >> 20) +
                                     " MiB (max_profiles_mb); it keeps what it had");
}

Result<ProfileRecord> ProfileStore::get(const std::string& id, const std::string& owner) const {
  auto it = profiles_.find(id);
  if (it == profiles_.end() || !sees(owner, it->second)) return not_found();
  return it->second;
}

std::vector<ProfileRecord> ProfileStore::list(const std::string& owner) const {
  std::vector<ProfileRecord> out;
  for (const auto& [id, r] : profiles_) {
    if (sees(owner, r)) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [this](const ProfileRecord& a, const ProfileRecord& b) {
    return order_.at(a.id) < order_.at(b.id);
  });
  return out;
}

Result<void> ProfileStore::remove(const std::string& id, const std::string& owner) {
  CABIN_ASSIGN_OR_RETURN(auto r, get(id, owner));
  if (!r.in_use_by.empty()) return in_use(r.in_use_by);
  store::Stmt q(db_, "DELETE FROM profiles WHERE id = ?1");
  q.bind(1, id);
  if (q.step() != SQLITE_DONE) return store::db_error(db_, "remove profile");
  std::error_code ec;
  std::filesystem::remove(archive_path(id), ec);
  profiles_.erase(id);
  order_.erase(id);
  return {};
}

Result<ProfileRecord> ProfileStore::check_out(const std::string& id, const std::string& owner,
                                              const std::string& session,
                                              const std::filesystem::path& into) {
  CABIN_ASSIGN_OR_RETURN(auto r, get(id, owner));
  if (!r.in_use_by.empty() && r.in_use_by != session) return in_use(r.in_use_by);
  if (r.saved_at > 0) {
    std::ifstream in(archive_path(id), std::ios::binary);
    std::stringstream sealed;
    sealed << in.rdbuf();
    if (!in) {
      return make_error(Errc::kInternal, "profile_io", "the profile's archive cannot be read");
    }
    auto plain = open_sealed(key_, sealed.str(), seal_context(id));
    if (!plain) {
      return make_error(Errc::kInternal, "profile_corrupt",
                        "the profile's archive does not open with this server's key");
    }
    CABIN_TRY(unpack(*plain, into, limits_));
  }
  r.in_use_by = session;
  CABIN_TRY(save(r));
  profiles_[id] = r;
  return r;
}

void mark_exited_cleanly(const std::filesystem::path& dir) {
  const auto prefs = dir / "Default" / "Preferences";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(prefs, ec))) return;
  std::ifstream in(prefs, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto j = parse_bounded(text.str(), {16u << 20, 64, 1u << 20});
  if (!j || !j->is_object()) return;
  auto& profile = (*j)["profile"];
  if (!profile.is_object()) return;
  profile["exit_type"] = "Normal";
  profile["exited_cleanly"] = true;
  (void)write_atomically(prefs, j->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::vector<std::string> ProfileStore::release_unless(const std::set<std::string>& live) {
  std::vector<std::string> freed;
  for (auto& [id, r] : profiles_) {
    if (r.in_use_by.empty() || live.count(r.in_use_by)) continue;
    ProfileRecord changed = r;
    changed.in_use_by.clear();
    if (save(changed)) {
      r = std::move(changed);
      freed.push_back(id);
    }
  }
  return freed;
}

Result<void> ProfileStore::check_in(const std::string& id, const std::string& session,
                                    const std::filesystem::path* from, int64_t now) {
  auto it = profiles_.find(id);
  if (it == profiles_.end()) return not_found();
  ProfileRecord r = it->second;
  if (r.in_use_by != session) return in_use(r.in_use_by.empty() ? "none" : r.in_use_by);
  Result<void> kept;
  if (from) {
    auto packed = pack(*from, limits_, kChromiumCacheDirs);
    if (!packed) {
      kept = packed.error();
    } else if (auto over = over_budget(r, packed->size())) {
      kept = std::move(*over);
    } else if (auto sealed = seal(key_, *packed, seal_context(id)); !sealed) {
      kept = make_error(Errc::kInternal, "profile_io", "sealing the profile failed");
    } else {
      kept = write_atomically(archive_path(id), *sealed);
      if (kept) {
        r.saved_at = now;
        r.size_bytes = packed->size();
      }
    }
  }
  r.in_use_by.clear();
  CABIN_TRY(save(r));
  profiles_[id] = r;
  return kept;
}

}  // namespace cabin::profiles
