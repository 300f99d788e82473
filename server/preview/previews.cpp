#include "server/preview/previews.h"

#include "server/api/ids.h"

namespace cabin::preview {

Result<Grant> Previews::create(const std::string& session_id, int port, int64_t expires_at,
                               std::optional<Grant>* replaced) {
  size_t count = 0;
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (it->second.session_id == session_id && it->second.port == port) {
      if (replaced) *replaced = it->second;
      if (keeper_.removed) keeper_.removed(it->first);
      it = grants_.erase(it);
      continue;
    }
    count += it->second.session_id == session_id;
    ++it;
  }
  if (count >= kMaxPreviewsPerSession) {
    return make_error(Errc::kConflict, "too_many_previews",
                      "a session has at most " + std::to_string(kMaxPreviewsPerSession) +
                          " previews; delete one first");
  }
  Grant g{api::new_preview_id(), session_id, port, clock_.unix_seconds(), expires_at};
  grants_[g.id] = g;
  if (keeper_.saved) keeper_.saved(g);
  return g;
}

std::optional<Grant> Previews::find(const std::string& id) const {
  auto it = grants_.find(id);
  if (it == grants_.end() || it->second.expires_at <= clock_.unix_seconds()) return std::nullopt;
  return it->second;
}

std::optional<Grant> Previews::find_port(const std::string& session_id, int port) const {
  for (const auto& [_, g] : grants_) {
    if (g.session_id == session_id && g.port == port && g.expires_at > clock_.unix_seconds()) {
      return g;
    }
  }
  return std::nullopt;
}

std::vector<Grant> Previews::list(const std::string& session_id) const {
  std::vector<Grant> out;
  for (const auto& [_, g] : grants_) {
    if (g.session_id == session_id && g.expires_at > clock_.unix_seconds()) out.push_back(g);
  }
  return out;
}

std::optional<Grant> Previews::remove(const std::string& session_id, const std::string& id) {
  auto it = grants_.find(id);
  if (it == grants_.end() || it->second.session_id != session_id) return std::nullopt;
  Grant g = it->second;
  grants_.erase(it);
  if (keeper_.removed) keeper_.removed(g.id);
  return g;
}

}  // namespace cabin::preview
