// The endpoints (Api) against a fake sandbox: routed, authenticated requests in, typed session
// verbs behind them, answers out. No HTTP server, Chromium or Xvfb.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/handlers/api.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/agent_protocol.h"
#include "server/auth/token_connections.h"
#include "server/auth/tokens.h"
#include "server/preview/previews.h"
#include "tests/unit/run_sync.h"
#include "tests/unit/server/fake_manager.h"

namespace {

using namespace cabin;
using cabin::testing::run_sync;
using nlohmann::json;
namespace http = boost::beast::http;

const std::string kKey = "test-api-key-0123456789";

struct ApiFixture : cabin::testing::FakeManager {
  ApiFixture() { config.public_url = "http://cabin.test"; }

  struct Answer {
    http::status status;
    json body;
  };

  // One request as the server would hand it over: routed, authenticated, handled.
  Answer call(http::verb method, const std::string& target, const std::string& body = "",
              std::optional<std::string> bearer = kKey) {
    http_api::Request req{method, target, 11};
    req.set(http::field::host, "cabin.test");
    if (bearer) req.set(http::field::authorization, "Bearer " + *bearer);
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    auto route = api::route(req.method_string(), req.target());
    http_api::Response res;
    if (!route) {
      res = http_api::error_response(route.error());
    } else if (auto authn = api.authenticate(*route, req); !authn) {
      res = http_api::error_response(authn.error());
    } else {
      res = run_sync(io, api.handle(*route, *authn, req));
    }
    json j = res.body().empty() ? json() : json::parse(res.body(), nullptr, false);
    return {res.result(), j};
  }

  std::string create_session() {
    auto a = call(http::verb::post, "/v1/sessions", "{}");
    REQUIRE(a.status == http::status::created);
    return a.body["id"];
  }

  ServerConfig config;
  auth::TokenService tokens{{{"k1", std::string(64, 'a')}}, clock};
  auth::TokenConnections connections{io.get_executor()};
  preview::Previews previews{clock};
  http_api::StaticFiles ui;
  http_api::Api api{config, *manager, tokens, connections, previews, kKey, ui};
};

TEST_CASE("a session through the endpoints: create, read, exec, delete, read again", "[api]") {
  ApiFixture f;
  auto created = f.call(http::verb::post, "/v1/sessions", "{}");
  REQUIRE(created.status == http::status::created);
  const std::string id = created.body["id"];
  CHECK(created.body["status"] == "running");
  CHECK(created.body["cdp_url"].get<std::string>().starts_with("ws://cabin.test/v1/sessions/" + id +
                                                               "/cdp?token="));

  auto got = f.call(http::verb::get, "/v1/sessions/" + id);
  CHECK(got.status == http::status::ok);
  CHECK(got.body["id"] == id);

  // The fake agent echoes argv on stdout; the handler only ever sees the typed result.
  auto ran = f.call(http::verb::post, "/v1/sessions/" + id + "/exec",
                    R"({"argv":["echo","through","the","agent"]})");
  CHECK(ran.status == http::status::ok);
  CHECK(ran.body["exit_code"] == 0);
  CHECK(ran.body["stdout"] == "echo through the agent");

  auto deleted = f.call(http::verb::delete_, "/v1/sessions/" + id);
  CHECK(deleted.status == http::status::ok);
  CHECK(deleted.body["status"] == "ended");
  CHECK(deleted.body["end_reason"] == "deleted");
  CHECK(f.driver->sandboxes[0]->destroyed);

  auto after = f.call(http::verb::get, "/v1/sessions/" + id);
  CHECK(after.status == http::status::ok);
  CHECK(after.body["status"] == "ended");
  auto exec_after =
      f.call(http::verb::post, "/v1/sessions/" + id + "/exec", R"({"argv":["true"]})");
  CHECK(exec_after.status == http::status::not_found);
}

TEST_CASE("bad requests are refused with the catalogue's codes, and nothing is asked of the agent",
          "[api]") {
  ApiFixture f;
  const std::string id = f.create_session();
  // Requests the session makes of its own (the browser's event stream) are not counted.
  auto asked_by_api = [&] {
    size_t n = 0;
    for (const auto& t : f.driver->sandboxes[0]->targets)
      n += t.rfind(agent_protocol::kEventsPath, 0) != 0;
    return n;
  };
  const size_t asked = asked_by_api();

  auto no_key = f.call(http::verb::get, "/v1/sessions/" + id, "", std::nullopt);
  CHECK(no_key.status == http::status::unauthorized);
  CHECK(no_key.body["error"]["code"] == "unauthenticated");

  auto wrong_key = f.call(http::verb::get, "/v1/sessions/" + id, "", "not-the-key");
  CHECK(wrong_key.status == http::status::unauthorized);

  auto unknown = f.call(http::verb::get, "/v1/sessions/ses_aaaaaaaaaaaaaaaaaaaa");
  CHECK(unknown.status == http::status::not_found);
  CHECK(unknown.body["error"]["code"] == "session_not_found");

  auto bad_json = f.call(http::verb::post, "/v1/sessions/" + id + "/exec", "{not json");
  CHECK(bad_json.status == http::status::bad_request);
  CHECK(bad_json.body["error"]["code"] == "invalid_json");

  auto unknown_field =
      f.call(http::verb::post, "/v1/sessions/" + id + "/exec", R"({"argv":["true"],"shell":1})");
  CHECK(unknown_field.status == http::status::bad_request);

  auto bad_scope =
      f.call(http::verb::post, "/v1/sessions/" + id + "/tokens", R"({"scope":"root"})");
  CHECK(bad_scope.status == http::status::bad_request);

  CHECK(asked_by_api() == asked);
}

TEST_CASE("a view token reads the live status but controls nothing, revocation ends it", "[api]") {
  ApiFixture f;
  const std::string id = f.create_session();
  auto minted = f.call(http::verb::post, "/v1/sessions/" + id + "/tokens", R"({"scope":"view"})");
  REQUIRE(minted.status == http::status::created);
  const std::string token = minted.body["token"];

  auto status = f.call(http::verb::get, "/v1/sessions/" + id + "/live/status?token=" + token, "",
                       std::nullopt);
  CHECK(status.status == http::status::ok);
  CHECK(status.body["scope"] == "view");

  // A token is no API key: the session API stays closed to it.
  auto exec =
      f.call(http::verb::post, "/v1/sessions/" + id + "/exec", R"({"argv":["true"]})", token);
  CHECK(exec.status == http::status::unauthorized);

  auto revoked = f.call(http::verb::post, "/v1/sessions/" + id + "/tokens/revoke", "{}");
  CHECK(revoked.status == http::status::ok);
  auto after = f.call(http::verb::get, "/v1/sessions/" + id + "/live/status?token=" + token, "",
                      std::nullopt);
  CHECK(after.status == http::status::unauthorized);
  CHECK(after.body["error"]["code"] == "token_revoked");
}

TEST_CASE("a screenshot the agent fails is a 502 that says what the agent answered", "[api]") {
  ApiFixture f;
  const std::string id = f.create_session();
  f.driver->sandboxes[0]->handler = [](const testing::AgentRequest& req) {
    if (std::string(req.target()).starts_with(agent_protocol::kScreenshotPath)) {
      return testing::json_answer(http::status::service_unavailable,
                                  R"({"error":{"code":"display_not_ready","message":"no X yet"}})");
    }
    return testing::default_agent_answer(req);
  };
  auto shot = f.call(http::verb::get, "/v1/sessions/" + id + "/screenshot");
  CHECK(shot.status == http::status::bad_gateway);
  CHECK(shot.body["error"]["code"] == "agent_error");
  CHECK(shot.body["error"]["message"].get<std::string>().find("503") != std::string::npos);
  // The session lives on.
  CHECK(f.call(http::verb::get, "/v1/sessions/" + id).body["status"] == "running");
}

}  // namespace
