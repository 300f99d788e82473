// Previews: the live port-preview grants, per session; one grant per (session, port).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace cabin::preview {

inline constexpr size_t kMaxPreviewsPerSession = 32;

struct Grant {
  std::string id;  // prv_...
  std::string session_id;
  int port = 0;
  int64_t created_at = 0;  // unix seconds
  int64_t expires_at = 0;
};

// Where grants are kept beyond this process, so that a restarted cabind honours the preview
// links and cookies it handed out. Null members: kept nowhere.
struct GrantKeeper {
  std::function<void(const Grant&)> saved;
  std::function<void(const std::string& id)> removed;
};

class Previews {
 public:
  explicit Previews(const Clock& clock) : clock_(clock) {}
  void use_keeper(GrantKeeper k) { keeper_ = std::move(k); }
  // At start-up: the grants kept by an earlier cabind (expired ones and those `live` says are
  // gone are dropped, from the keeper too).
  template <typename IsLive>
  void restore(const std::vector<Grant>& kept, IsLive live) {
    for (const auto& g : kept) {
      if (g.expires_at > clock_.unix_seconds() && live(g.session_id)) {
        grants_[g.id] = g;
      } else if (keeper_.removed) {
        keeper_.removed(g.id);
      }
    }
  }

  // A new grant; one of the same (session, port) is replaced, and returned in `replaced`.
  Result<Grant> create(const std::string& session_id, int port, int64_t expires_at,
                       std::optional<Grant>* replaced);
  // Live (unexpired) grants only.
  std::optional<Grant> find(const std::string& id) const;
  std::optional<Grant> find_port(const std::string& session_id, int port) const;
  std::vector<Grant> list(const std::string& session_id) const;
  std::optional<Grant> remove(const std::string& session_id, const std::string& id);
  // Drops expired grants and those of sessions `live` says are gone.
  template <typename IsLive>
  void prune(IsLive live) {
    for (auto it = grants_.begin(); it != grants_.end();) {
      bool drop = it->second.expires_at <= clock_.unix_seconds() || !live(it->second.session_id);
      if (drop && keeper_.removed) keeper_.removed(it->first);
      it = drop ? grants_.erase(it) : std::next(it);
    }
  }

 private:
  const Clock& clock_;
  GrantKeeper keeper_;
  std::map<std::string, Grant> grants_;  // by id
};

}  // namespace cabin::preview
