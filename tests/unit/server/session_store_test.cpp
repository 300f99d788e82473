#include <catch2/catch.hpp>

#include "server/store/session_store.h"

using namespace cabin::store;

TEST_CASE("the store keeps records and ends leftovers of an earlier run") {
  auto store = SessionStore::open(":memory:");
  REQUIRE(store);
  SessionRecord r;
  r.id = "ses_aaaaaaaaaaaaaaaaaaaa";
  r.driver = "namespace";
  r.status = "running";
  r.width = 1024;
  r.height = 768;
  r.start_url = "about:blank";
  r.timeout_s = 60;
  r.created_at = 100;
  r.expires_at = 160;
  REQUIRE((*store)->insert(r));
  SessionRecord second = r;
  second.id = "ses_bbbbbbbbbbbbbbbbbbbb";
  second.created_at = 200;
  REQUIRE((*store)->insert(second));
  CHECK_FALSE((*store)->insert(second));  // ids are unique

  auto got = (*store)->get(r.id);
  REQUIRE(got);
  CHECK(got->width == 1024);
  CHECK(got->start_url == "about:blank");
  CHECK_FALSE((*store)->get("ses_cccccccccccccccccccc"));

  auto live = (*store)->list(false, 10);
  REQUIRE(live.size() == 2);
  CHECK(live[0].id == second.id);  // newest first

  REQUIRE((*store)->set_status(r.id, "ended", "deleted", 150));
  CHECK((*store)->list(false, 10).size() == 1);
  CHECK((*store)->list(true, 10).size() == 2);
  CHECK((*store)->get(r.id)->end_reason == "deleted");

  auto ended = (*store)->end_unfinished("server restarted", 300);
  REQUIRE(ended == std::vector<std::string>{second.id});
  CHECK((*store)->get(second.id)->status == "ended");
  CHECK((*store)->list(false, 10).empty());
}
