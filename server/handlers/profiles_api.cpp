// The profile endpoints of Api: saved browser profiles that sessions start from
// (`"profile": {"id", "persist"}` in a create), each the tenant's that made it.
#include "common/json_fields.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"

namespace cabin::http_api {
namespace {

using nlohmann::json;

json profile_json(const profiles::ProfileRecord& p) {
  json j = {{"id", p.id},
            {"name", p.name},
            {"owner", p.owner},
            {"created_at", format_rfc3339(p.created_at)},
            {"saved_at", p.saved_at ? json(format_rfc3339(p.saved_at)) : json(nullptr)},
            {"size_bytes", p.size_bytes},
            {"in_use_by", p.in_use_by.empty() ? json(nullptr) : json(p.in_use_by)}};
  return j;
}

}  // namespace

Response Api::create_profile(const Authn& authn, const Request& req) {
  auto* store = sessions_.profiles();
  if (!store) return error_response(api::errors::not_found_endpoint());
  auto body = parse_object(req.body());
  if (!body) return error_response(body.error());
  if (auto r = reject_unknown(*body, {"name"}); !r) return error_response(r.error());
  auto f = body->find("name");
  if (f == body->end()) return error_response(invalid_field("name", "is required"));
  auto name = read_string(*f, "name", profiles::kMaxProfileName);
  if (!name) return error_response(name.error());
  auto made = store->create(authn.who(), *name, tokens_.clock().unix_seconds());
  if (!made) return error_response(made.error());
  api_log().info("profile {} ({}) made for {}", made->id, made->name, made->owner);
  return json_response(http::status::created, profile_json(*made));
}

Response Api::list_profiles(const Authn& authn) const {
  auto* store = sessions_.profiles();
  if (!store) return error_response(api::errors::not_found_endpoint());
  json list = json::array();
  for (const auto& p : store->list(authn.who())) list.push_back(profile_json(p));
  return json_response(http::status::ok, {{"profiles", list}});
}

Response Api::get_profile(const Authn& authn, const api::Route& route) const {
  auto* store = sessions_.profiles();
  if (!store) return error_response(api::errors::not_found_endpoint());
  auto p = store->get(route.profile_id, authn.who());
  if (!p) return error_response(p.error());
  return json_response(http::status::ok, profile_json(*p));
}

Response Api::delete_profile(const Authn& authn, const api::Route& route) {
  auto* store = sessions_.profiles();
  if (!store) return error_response(api::errors::not_found_endpoint());
  auto p = store->get(route.profile_id, authn.who());
  if (!p) return error_response(p.error());
  if (auto r = store->remove(route.profile_id, authn.who()); !r) return error_response(r.error());
  api_log().info("profile {} ({}) deleted", p->id, p->name);
  json j = profile_json(*p);
  j["deleted"] = true;
  return json_response(http::status::ok, j);
}

}  // namespace cabin::http_api
