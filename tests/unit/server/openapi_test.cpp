// docs/openapi.json against the route table, and the route table against route().
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "server/api/openapi_doc.h"
#include "server/api/router.h"

using namespace cabin::api;

namespace {

std::string read_spec_file() {
  std::ifstream in(std::string(CABIN_SOURCE_DIR) + "/docs/openapi.json");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A concrete target for a path template: each {parameter} gets a valid example.
std::string instantiate(std::string_view tmpl) {
  static const std::pair<std::string_view, std::string_view> kExamples[] = {
      {"{session_id}", "ses_0123456789abcdefghij"},
      {"{preview_id}", "prv_0123456789abcdefghij"},
      {"{recording_id}", "rec_0123456789abcdefghij"},
      {"{key_id}", "key_0123456789abcdefghij"},
      {"{profile_id}", "prf_0123456789abcdefghij"},
      {"{target_id}", "0A1B2C3D4E5F60718293A4B5C6D7E8F9"},
      {"{name}", "console-1a2b3c.js"}};
  std::string out(tmpl);
  for (const auto& [param, value] : kExamples) {
    for (size_t pos; (pos = out.find(param)) != std::string::npos;) {
      out.replace(pos, param.size(), value);
    }
  }
  return out;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

TEST_CASE("every entry of the route table routes to its id") {
  for (const auto& e : route_table()) {
    const std::string target = instantiate(e.path);
    INFO(e.method << " " << target);
    REQUIRE(target.find('{') == std::string::npos);
    auto r = route(e.method, target);
    REQUIRE(r);
    CHECK(r->id == e.id);
  }
}

TEST_CASE("every route id is in the route table") {
  std::set<RouteId> seen;
  for (const auto& e : route_table()) seen.insert(e.id);
  for (int i = 0; i <= static_cast<int>(RouteId::kMcp); ++i) {
    INFO("route id " << i);
    CHECK(seen.count(static_cast<RouteId>(i)) == 1);
  }
}

TEST_CASE("docs/openapi.json names exactly the routes cabind routes") {
  const auto doc = nlohmann::json::parse(read_spec_file());
  REQUIRE(doc.at("openapi").get<std::string>().starts_with("3.1."));
  static const std::set<std::string> kMethods = {"get",   "put",  "post",    "delete",
                                                 "patch", "head", "options", "trace"};
  std::set<std::pair<std::string, std::string>> in_spec;
  bool preview_prefix = false;
  for (const auto& [path, item] : doc.at("paths").items()) {
    // Path-based previews are served by the preview proxy, not the router: every path under
    // the prefix is relayed to the app.
    if (item.value("x-cabin-prefix", false)) {
      CHECK(path == "/preview/{preview_id}/");
      preview_prefix = true;
      continue;
    }
    for (const auto& [method, op] : item.items()) {
      if (kMethods.count(method)) in_spec.emplace(upper(method), path);
    }
  }
  CHECK(preview_prefix);
  std::set<std::pair<std::string, std::string>> routed;
  for (const auto& e : route_table()) routed.emplace(std::string(e.method), std::string(e.path));
  for (const auto& [method, path] : routed) {
    INFO("routed but not in docs/openapi.json: " << method << " " << path);
    CHECK(in_spec.count({method, path}) == 1);
  }
  for (const auto& [method, path] : in_spec) {
    INFO("in docs/openapi.json but not routed: " << method << " " << path);
    CHECK(routed.count({method, path}) == 1);
  }
}

TEST_CASE("cabind serves docs/openapi.json as it is in the tree") {
  CHECK(openapi_document() == read_spec_file());
}
