// ProfileStore: browser profiles that outlive their sessions. A record per profile in the
// database (who made it, its name, which session has it now), and its saved tree as one archive
// (archive.h) sealed with cabind's profile key in <state-dir>/profiles/, so that the disk never
// holds a profile's cookies in the clear. A profile is used by one live session at a time.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/profile_archive.h"
#include "common/result.h"

namespace cabin::profiles {

struct ProfileRecord {
  std::string id;     // api::valid_profile_id
  std::string owner;  // the tenant that made it: "admin" or a key's id
  std::string name;
  int64_t created_at = 0;
  int64_t saved_at = 0;     // 0: never saved, empty
  uint64_t size_bytes = 0;  // of its last saved tree
  std::string in_use_by;    // the session that has it; empty: free
};

inline constexpr size_t kMaxProfileName = 128;

// What one owner's saved profiles may take: how many, and their archives' bytes; 0: no bound.
struct ProfileBudget {
  int max_profiles = 0;
  uint64_t max_bytes = 0;
};
// Marks the Chromium profile in `dir` as left by a browser that exited cleanly (its Preferences'
// exit_type), so that a copy taken while it ran does not offer to restore a crashed session.
// Preferences it cannot read are left as they are.
void mark_exited_cleanly(const std::filesystem::path& dir);

class ProfileStore {
 public:
  // Its own connection to the database at `db_path` (":memory:" for tests); archives in `dir`
  // (made 0700), sealed with `key` (32 bytes).
  static Result<std::unique_ptr<ProfileStore>> open(const std::string& db_path,
                                                    std::filesystem::path dir, std::string key,
                                                    ArchiveLimits limits = {});
  ~ProfileStore();
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  // Each owner's budget (the admin's: none), asked at each create and save.
  void use_budgets(std::function<ProfileBudget(const std::string& owner)> budget_of) {
    budget_of_ = std::move(budget_of);
  }
  // A new, empty profile of `owner`'s. invalid_request for a name that is empty, too long or
  // not printable; 429 quota_profiles when the owner has max_profiles, or its profiles take
  // max_bytes or more.
  Result<ProfileRecord> create(const std::string& owner, const std::string& name, int64_t now);
  // profile_not_found unless `owner` made it ("admin" sees every profile).
  Result<ProfileRecord> get(const std::string& id, const std::string& owner) const;
  // `owner`'s profiles ("admin": all), oldest first.
  std::vector<ProfileRecord> list(const std::string& owner) const;
  // Removes it and its archive; profile_in_use while a session has it.
  Result<void> remove(const std::string& id, const std::string& owner);
  // Gives the profile to `session`: profile_in_use (409) if another session has it; then its
  // saved tree is unpacked into `into` (an existing, empty directory).
  Result<ProfileRecord> check_out(const std::string& id, const std::string& owner,
                                  const std::string& session, const std::filesystem::path& into);
  // Takes it back from `session`. With `from`, the tree there is packed, sealed and kept as the
  // profile's from now on; one over the limits, or that would take its owner's profiles past
  // their max_bytes (quota_profiles), is refused and the profile keeps what it had.
  // Free again either way.
  Result<void> check_in(const std::string& id, const std::string& session,
                        const std::filesystem::path* from, int64_t now);
  // Frees every profile held by a session not in `live` (one a restart did not bring back),
  // keeping what it had; answers their ids.
  std::vector<std::string> release_unless(const std::set<std::string>& live);

 private:
  ProfileStore(sqlite3* db, std::filesystem::path dir, std::string key, ArchiveLimits limits)
      : db_(db), dir_(std::move(dir)), key_(std::move(key)), limits_(limits) {}
  std::filesystem::path archive_path(const std::string& id) const { return dir_ / (id + ".sealed"); }
  // What an archive is sealed to: its profile's id, so that it opens in no other's place.
  static std::string seal_context(const std::string& id);
  void bind_legacy_archives();
  // How many profiles `owner` has, and their saved bytes but those of `except`.
  std::pair<int, uint64_t> held_by(const std::string& owner, const std::string& except) const;
  // quota_profiles when a save of `size` bytes would take r's owner past its budget.
  std::optional<Error> over_budget(const ProfileRecord& r, uint64_t size) const;
  Result<void> save(const ProfileRecord& r);

  sqlite3* db_;
  std::filesystem::path dir_;
  std::string key_;
  ArchiveLimits limits_;
  std::map<std::string, ProfileRecord> profiles_;  // by id
  std::map<std::string, uint64_t> order_;          // id -> creation order
  uint64_t next_ = 0;
  std::function<ProfileBudget(const std::string&)> budget_of_;
};

}  // namespace cabin::profiles
