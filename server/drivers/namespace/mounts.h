// The sandbox's filesystem: a mount table (data) and the code that builds a new root from it and
// pivots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace cabin::nsbox {

enum class MountKind {
  kTmpfs,         // a fresh tmpfs; data = options
  kBindRo,        // recursive bind of a host dir, every mount in it made read-only
  kBindRw,        // bind of a host dir, writable
  kBindFileRo,    // read-only bind of one host file onto an empty file
  kBindDev,       // bind of one host device node onto an empty file
  kHostEntry,     // mirror a host path: symlink as symlink, dir as kBindRo, file as kBindFileRo,
                  // absent: skip
  kProc,          // procfs of the sandbox's pid namespace
  kSysfs,         // sysfs of the sandbox's net namespace
  kDevpts,        // a private devpts instance
  kSymlink,       // source = link text
  kRemountRo,     // make an earlier mount read-only once it is filled
};

struct MountEntry {
  MountKind kind;
  std::string source;
  std::string target;       // absolute path inside the sandbox
  unsigned long flags = 0;  // MS_* flags for the mount (or the read-only remount)
  std::string data;         // filesystem options
  bool optional = false;    // failure is a warning, not a failed sandbox
  const char* why = "";
};

struct MountPlan {
  std::string agent_source;    // host file for the agent binary; empty: none
  std::string chromium_policy_source;  // host file for Chromium's managed policy; empty: none
  std::string profile_source;  // host dir bound writable as Chromium's profile; empty: none
  uint64_t tmpfs_bytes = 512ull << 20;
};

// The whole table, in the order it is applied.
std::vector<MountEntry> sandbox_mounts(const MountPlan& plan);

// Makes every mount private, mounts a tmpfs at new_root, applies the table under it, pivots into
// it, detaches the old root and makes "/" read-only. Optional entries that fail are appended to
// `warnings`.
Result<void> build_and_enter_root(const std::vector<MountEntry>& table, const std::string& new_root,
                                  std::vector<std::string>* warnings);

// Decodes the octal escapes (\040 and friends) of a /proc/self/mountinfo path field.
std::string unescape_mountinfo(const std::string& field);

}  // namespace cabin::nsbox
