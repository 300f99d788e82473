// The tenant key endpoints of Api: mint, list and revoke, for the admin key only (tenant keys
// are refused before they get here: Api::tenant_may).
#include "server/api/errors.h"
#include "server/api/key_spec.h"
#include "server/handlers/api.h"
#include "server/metrics/metrics.h"

namespace cabin::http_api {

using nlohmann::json;

json Api::key_json(const store::ApiKeyRecord& k) const {
  json j = {{"id", k.id},
            {"name", k.name},
            {"max_sessions", k.max_sessions},
            {"max_creates_per_minute", k.max_creates_per_minute},
            {"max_memory_mb", k.max_memory_mb},
            {"max_vcpus", k.max_vcpus},
            {"max_recordings_mb", k.max_recordings_mb},
            {"max_profiles", k.max_profiles},
            {"max_profiles_mb", k.max_profiles_mb},
            {"created_at", format_rfc3339(k.created_at)}};
  if (k.revoked_at != 0) j["revoked_at"] = format_rfc3339(k.revoked_at);
  return j;
}

Response Api::create_key(const Request& req) {
  if (!keys_) return error_response(api::errors::not_found_endpoint());
  auto spec = api::parse_key_spec(req.body());
  if (!spec) return error_response(spec.error());
  auto minted = keys_->mint(*spec, tokens_.clock().unix_seconds());
  if (!minted) return error_response(minted.error());
  metrics::registry().replace("cabin_api_keys", {{{}, double(keys_->list().size())}});
  api_log().info("API key {} ({}) minted: {} sessions, {} creates a minute", minted->record.id,
                 minted->record.name, minted->record.max_sessions,
                 minted->record.max_creates_per_minute);
  json j = key_json(minted->record);
  // The only time the key is shown: only its hash is kept.
  j["key"] = minted->key;
  return json_response(http::status::created, j);
}

Response Api::list_keys() const {
  if (!keys_) return error_response(api::errors::not_found_endpoint());
  json list = json::array();
  for (const auto& k : keys_->list()) {
    json j = key_json(k);
    j["live_sessions"] = sessions_.tenant_load(k.id);
    list.push_back(std::move(j));
  }
  return json_response(http::status::ok, {{"keys", list}});
}

Response Api::delete_key(const api::Route& route) {
  if (!keys_) return error_response(api::errors::not_found_endpoint());
  auto revoked = keys_->revoke(route.key_id, tokens_.clock().unix_seconds());
  if (!revoked) return error_response(revoked.error());
  metrics::registry().replace("cabin_api_keys", {{{}, double(keys_->list().size())}});
  api_log().info("API key {} ({}) revoked", revoked->id, revoked->name);
  return json_response(http::status::ok, key_json(*revoked));
}

}  // namespace cabin::http_api
