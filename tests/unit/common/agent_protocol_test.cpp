#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "common/agent_protocol.h"

using namespace cabin;
using namespace cabin::agent_protocol;

TEST_CASE("exec requests parse strictly") {
  auto ok = parse_exec_request(R"({"argv":["sh","-c","echo hi"],"timeout_ms":500,"env":{"A":"b"},
                                   "cwd":"/tmp","stdin":"x","max_output_bytes":10})");
  REQUIRE(ok);
  CHECK(ok->argv.size() == 3);
  CHECK(ok->timeout_ms == 500);
  CHECK(ok->env.at("A") == "b");
  CHECK(ok->stdin_data == "x");

  auto round = parse_exec_request(to_json(*ok).dump());
  REQUIRE(round);
  CHECK(round->argv == ok->argv);
  CHECK(round->cwd == "/tmp");

  for (const char* bad : {
           "", "[]", "{", R"({})", R"({"argv":[]})", R"({"argv":"sh"})", R"({"argv":[""]})",
           R"({"argv":[1]})", R"({"argv":["sh"],"timeout_ms":0})",
           R"({"argv":["sh"],"timeout_ms":600001})", R"({"argv":["sh"],"timeout_ms":1.5})",
           R"({"argv":["sh"],"max_output_bytes":99999999999})", R"({"argv":["sh"],"bogus":1})",
           R"({"argv":["sh"],"env":{"A=B":"c"}})", R"({"argv":["sh"],"env":{"A":1}})",
           R"({"argv":["a\u0000b"]})"}) {
    INFO(bad);
    auto r = parse_exec_request(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().errc == Errc::kInvalidArgument);
  }
}

TEST_CASE("exec results from the guest are checked and bounded") {
  ExecResult r;
  r.exit_code = 3;
  r.stdout_data = "out";
  r.stderr_data = "err";
  r.duration_ms = 5;
  auto parsed = parse_exec_result(to_json(r).dump(), 100);
  REQUIRE(parsed);
  CHECK(parsed->exit_code == 3);
  CHECK_FALSE(parsed->signal);

  ExecResult killed;
  killed.signal = 9;
  auto k = parse_exec_result(to_json(killed).dump(), 100);
  REQUIRE(k);
  CHECK_FALSE(k->exit_code);
  CHECK(k->signal == 9);
  CHECK_FALSE(parse_exec_result(R"({"exit_code":300,"signal":null,"timed_out":false,"stdout":"",
      "stderr":"","stdout_truncated":false,"stderr_truncated":false,"duration_ms":1})", 100));
  CHECK(parsed->stdout_data == "out");

  CHECK_FALSE(parse_exec_result("[]", 100));
  CHECK_FALSE(parse_exec_result(R"({"exit_code":"0"})", 100));
  r.stdout_data = std::string(1000, 'x');
  auto big = parse_exec_result(to_json(r).dump(), 10);
  REQUIRE_FALSE(big);
  CHECK(big.error().errc == Errc::kBadGateway);
}

TEST_CASE("navigate requests parse strictly, and what cabind sends parses back") {
  auto ok = parse_navigate_request(R"({"url":"https://example.test/a","wait_until":"networkidle"})");
  REQUIRE(ok);
  CHECK(ok->url == "https://example.test/a");
  CHECK(ok->wait_until == "networkidle");
  auto defaulted = parse_navigate_request(R"({"url":"about:blank"})");
  REQUIRE(defaulted);
  CHECK(defaulted->wait_until == "load");
  auto back = parse_navigate_request(to_json(NavigateRequest{"data:text/html,x", "commit"}).dump());
  REQUIRE(back);
  CHECK(back->url == "data:text/html,x");
  CHECK(back->wait_until == "commit");

  for (const std::string& bad : {
           std::string("{}"),
           std::string(R"({"url":""})"),
           std::string(R"({"url":"a\nb"})"),
           std::string(R"({"url":"a\u0000b"})"),
           std::string(R"({"url":5})"),
           R"({"url":")" + std::string(kMaxNavigateUrl + 1, 'u') + R"("})",
           std::string(R"({"url":"x","wait_until":"soon"})"),
           std::string(R"({"url":"x","extra":1})"),
           std::string("[1]"),
           std::string("not json"),
       }) {
    auto r = parse_navigate_request(bad);
    CHECK_FALSE(r);
    if (!r) CHECK(r.error().errc == Errc::kInvalidArgument);
  }
}

TEST_CASE("browser states are checked and bounded on both sides") {
  auto ok = parse_browser_state(
      R"({"cookies":[{"name":"sid","value":"x","domain":"shop.test","path":"/"}],)"
      R"("urls":["http://shop.test/","data:text/html,<p>hi</p>"]})");
  REQUIRE(ok);
  CHECK((*ok)["cookies"].size() == 1);
  CHECK((*ok)["urls"][1] == "data:text/html,<p>hi</p>");
  CHECK(parse_browser_state(R"({"cookies":[],"urls":[]})"));
  for (const char* bad : {
           "", "[]", R"({"cookies":[]})", R"({"urls":[]})", R"({"cookies":{},"urls":[]})",
           R"({"cookies":[{"name":"a"}],"urls":[]})", R"({"cookies":[{"name":1,"value":"v"}],"urls":[]})",
           R"({"cookies":[7],"urls":[]})", R"({"cookies":[],"urls":[""]})",
           R"({"cookies":[],"urls":["http://a/\nb"]})", R"({"cookies":[],"urls":[3]})",
           R"({"cookies":[],"urls":[],"extra":1})"}) {
    INFO(bad);
    CHECK_FALSE(parse_browser_state(bad));
  }
  std::string many = R"({"cookies":[],"urls":[)";
  for (size_t i = 0; i <= kMaxStatePages; ++i) many += std::string(i ? "," : "") + R"("http://a/")";
  CHECK_FALSE(parse_browser_state(many + "]}"));
  std::string cookies = R"({"urls":[],"cookies":[)";
  for (size_t i = 0; i <= kMaxStateCookies; ++i)
    cookies += std::string(i ? "," : "") + R"({"name":"n","value":"v"})";
  CHECK_FALSE(parse_browser_state(cookies + "]}"));
  CHECK_FALSE(parse_browser_state(std::string(kMaxStateBytes + 1, ' ')));
  std::string deep = R"({"cookies":[{"name":"n","value":"v","x":)";
  for (int i = 0; i < 20; ++i) deep += "[";
  CHECK_FALSE(parse_browser_state(deep));
  CHECK_FALSE(parse_browser_state(R"({"cookies":[],"urls":[")" + std::string(kMaxNavigateUrl + 1, 'a') + R"("]})"));
}

TEST_CASE("restored requests and the restore line parse strictly and round-trip") {
  RestoredRequest r;
  r.secret = std::string(64, 'a');
  r.unix_ns = 1796300000123456789;
  r.seed_hex = std::string(2 * kRestoreSeedBytes, '0');
  r.seed_hex[0] = 'f';
  r.machine_id = std::string(32, '7');
  auto back = parse_restored_request(to_json(r).dump());
  REQUIRE(back);
  CHECK(back->secret == r.secret);
  CHECK(back->unix_ns == r.unix_ns);
  CHECK(back->machine_id == r.machine_id);
  for (auto mutate : std::vector<std::function<void(nlohmann::json&)>>{
           [](auto& j) { j.erase("secret"); },
           [](auto& j) { j["secret"] = std::string(31, 'a'); },
           [](auto& j) { j["secret"] = std::string(64, 'A'); },
           [](auto& j) { j["unix_ns"] = 5; },
           [](auto& j) { j["unix_ns"] = "1796300000123456789"; },
           [](auto& j) { j["seed"] = std::string(2 * kRestoreSeedBytes - 2, '0'); },
           [](auto& j) { j["seed"] = std::string(2 * kRestoreSeedBytes, 'g'); },
           [](auto& j) { j["machine_id"] = std::string(33, '0'); },
           [](auto& j) { j["extra"] = 1; }}) {
    auto j = to_json(r);
    mutate(j);
    INFO(j.dump());
    CHECK_FALSE(parse_restored_request(j.dump()));
  }

  const std::string line = format_restore_line(r, 42);
  CHECK(line.size() <= kMaxRestoreLine);
  auto parsed = parse_restore_line(line);
  REQUIRE(parsed);
  CHECK(parsed->unix_ns == r.unix_ns);
  CHECK(parsed->monotonic_ns == 42);
  REQUIRE(parsed->seed.size() == kRestoreSeedBytes);
  CHECK(static_cast<unsigned char>(parsed->seed[0]) == 0xf0);
  CHECK(parsed->machine_id == r.machine_id);
  for (std::string bad : {std::string(""), line.substr(0, line.size() - 1), line + "\n",
                          " " + line, std::string("1 2 3 4\n"), line.substr(0, 20) + " x\n",
                          "-" + line, std::string(kMaxRestoreLine + 1, '1')}) {
    INFO(bad);
    CHECK_FALSE(parse_restore_line(bad));
  }

  // Without a machine-id the VM keeps its own (a resume from hibernation).
  r.machine_id.clear();
  auto kept = parse_restored_request(to_json(r).dump());
  REQUIRE(kept);
  CHECK(kept->machine_id.empty());
  const std::string keep_line = format_restore_line(*kept, 7);
  CHECK(keep_line.ends_with(" -\n"));
  auto keep = parse_restore_line(keep_line);
  REQUIRE(keep);
  CHECK(keep->machine_id.empty());
  CHECK_FALSE(parse_restore_line(keep_line.substr(0, keep_line.size() - 2) + "--\n"));
}

TEST_CASE("the clipboard's text is an object with text, within the limit") {
  auto ok = parse_clipboard(R"({"text":"Grüße 🙂"})");
  REQUIRE(ok);
  CHECK(*ok == "Grüße 🙂");
  for (const char* bad : {"", "[]", R"({})", R"({"text":1})", R"({"text":"a","x":1})"})
    CHECK_FALSE(parse_clipboard(bad));
  auto big = parse_clipboard(R"({"text":")" + std::string(kMaxClipboardBytes + 1, 'a') + "\"}");
  REQUIRE_FALSE(big);
  CHECK(big.error().code == "clipboard_too_large");
}

TEST_CASE("browser events from the guest: known types and fields, strings or counts, flat") {
  auto ok = parse_browser_event(
      R"({"seq":7,"type":"download_finished","id":"g","name":"a.txt","size":12,"sha256":"ab"})");
  REQUIRE(ok);
  CHECK(ok->seq == 7);
  CHECK(ok->type == "download_finished");
  CHECK(ok->fields.size() == 4);
  CHECK(ok->fields["size"] == 12);
  CHECK_FALSE(ok->fields.contains("seq"));
  for (const char* bad : {
           "", "[]", R"({"type":"navigated"})", R"({"seq":0,"type":"navigated"})",
           R"({"seq":-1,"type":"navigated"})", R"({"seq":1,"type":"session_ended"})",
           R"({"seq":1,"type":"navigated","cookie":"x"})",
           R"({"seq":1,"type":"navigated","url":{"a":1}})",
           R"({"seq":1,"type":"navigated","url":["a"]})",
           R"({"seq":1,"type":"navigated","size":-3})"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_browser_event(bad));
  }
  CHECK_FALSE(parse_browser_event(R"({"seq":1,"type":"navigated","url":")" +
                                  std::string(kMaxEventString + 1, 'a') + "\"}"));
  CHECK_FALSE(parse_browser_event(std::string(kMaxEventLine + 1, ' ')));
}

TEST_CASE("file paths: absolute, without dot parts, bounded") {
  CHECK(check_file_path("/tmp/a b/ü.txt").value() == "/tmp/a b/ü.txt");
  CHECK(check_file_path("/tmp/dir/").value() == "/tmp/dir");
  CHECK(check_file_path("/").value() == "/");
  const std::vector<std::string> bads = {"",       "tmp/a", "/tmp/../etc",
                                         "/tmp/./a", "/tmp//a", "/..",
                                         std::string("/tmp/a\0b", 8),
                                         "/" + std::string(kMaxFilePath, 'a')};
  for (const auto& bad : bads) {
    CAPTURE(bad);
    CHECK_FALSE(check_file_path(bad));
  }
}

TEST_CASE("directory listings from the guest are checked entry by entry") {
  auto ok = parse_dir_listing(
      R"({"entries":[{"name":"a","type":"file","size":3,"mtime":1700000000},
                     {"name":"d","type":"dir","size":0,"mtime":0}]})");
  REQUIRE(ok);
  REQUIRE(ok->size() == 2);
  CHECK((*ok)[0].size == 3);
  CHECK((*ok)[1].type == "dir");
  for (const char* bad : {
           "{}", R"({"entries":{}})", R"({"entries":[1]})",
           R"({"entries":[{"name":"a/b","type":"file","size":1,"mtime":0}]})",
           R"({"entries":[{"name":"..","type":"dir","size":0,"mtime":0}]})",
           R"({"entries":[{"name":"a","type":"fifo","size":0,"mtime":0}]})",
           R"({"entries":[{"name":"a","type":"file","size":-1,"mtime":0}]})"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_dir_listing(bad));
  }
}

TEST_CASE("recording requests and the guest's statuses parse strictly") {
  auto ok = parse_recording_request(R"({"id":"rec_a1","fps":10,"crf":20,"max_seconds":5,"max_bytes":1048576})");
  REQUIRE(ok);
  CHECK(ok->fps == 10);
  CHECK(parse_recording_request(to_json(*ok).dump()).value() == *ok);
  for (const char* bad : {R"({})", R"({"id":"A"})", R"({"id":"a/b"})", R"({"id":"a","fps":0})",
                          R"({"id":"a","fps":31})", R"({"id":"a","crf":50})",
                          R"({"id":"a","max_bytes":1})", R"({"id":"a","x":1})"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_recording_request(bad));
  }
  auto st = parse_recording_status(
      R"({"id":"rec_a1","state":"stopped","reason":"max_size","frames":3,"bytes":9,"seconds":0.3,"path":"/tmp/x.mp4"})");
  REQUIRE(st);
  CHECK(st->reason == "max_size");
  CHECK(parse_recording_status(to_json(*st).dump()).value().frames == 3);
  for (const char* bad : {
           R"({"id":"rec_a1","state":"done","reason":"","frames":0,"bytes":0,"seconds":0,"path":""})",
           R"({"id":"rec_a1","state":"stopped","reason":"","frames":-1,"bytes":0,"seconds":0,"path":""})",
           R"({"id":"rec_a1","state":"stopped","reason":"","frames":0,"bytes":0,"seconds":-1,"path":""})",
           R"({"id":"../x","state":"stopped","reason":"","frames":0,"bytes":0,"seconds":0,"path":""})"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_recording_status(bad));
  }
}
