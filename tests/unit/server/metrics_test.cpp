// The metrics registry's exposition: families, labels, histograms and scrape-time gauges, in the
// Prometheus text format.
#include "server/metrics/metrics.h"

#include <catch2/catch.hpp>

namespace {

using namespace cabin::metrics;

TEST_CASE("counters, gauges and histograms come out in the text format") {
  Registry r;
  r.declare("t_total", Type::kCounter, "Things.", {"kind"});
  r.declare("t_open", Type::kGauge, "Open ones.", {});
  r.declare("t_seconds", Type::kHistogram, "How long.", {"driver"}, {0.5, 1});
  r.inc("t_total", {"a"});
  r.inc("t_total", {"a"}, 2);
  r.inc("t_total", {"say \"hi\"\n\\"});
  r.inc("t_open", {}, 3);
  r.observe("t_seconds", {"ns"}, 0.25);
  r.observe("t_seconds", {"ns"}, 0.75);
  r.observe("t_seconds", {"ns"}, 5);
  const std::string text = r.exposition();
  CHECK_THAT(text, Catch::Contains("# HELP t_total Things.\n# TYPE t_total counter\n"));
  CHECK_THAT(text, Catch::Contains("t_total{kind=\"a\"} 3\n"));
  CHECK_THAT(text, Catch::Contains("t_total{kind=\"say \\\"hi\\\"\\n\\\\\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE t_open gauge\nt_open 3\n"));
  CHECK_THAT(text, Catch::Contains("t_seconds_bucket{driver=\"ns\",le=\"0.5\"} 1\n"
                                   "t_seconds_bucket{driver=\"ns\",le=\"1\"} 2\n"
                                   "t_seconds_bucket{driver=\"ns\",le=\"+Inf\"} 3\n"
                                   "t_seconds_sum{driver=\"ns\"} 6\n"
                                   "t_seconds_count{driver=\"ns\"} 3\n"));
}

TEST_CASE("scrape-time gauges replace what they held") {
  Registry r;
  r.declare("live", Type::kGauge, "Live.", {"state"});
  int calls = 0;
  r.on_scrape([&](Registry& reg) {
    ++calls;
    if (calls == 1)
      reg.replace("live", {{{"running"}, 2}, {{"paused"}, 1}});
    else
      reg.replace("live", {{{"running"}, 1}});
  });
  std::string first = r.exposition();
  CHECK_THAT(first, Catch::Contains("live{state=\"paused\"} 1\n"));
  CHECK_THAT(first, Catch::Contains("live{state=\"running\"} 2\n"));
  std::string second = r.exposition();
  CHECK_THAT(second, !Catch::Contains("paused"));
  CHECK(calls == 2);
}

TEST_CASE("end reasons map to a few label values") {
  CHECK(end_reason_label("deleted") == "deleted");
  CHECK(end_reason_label("idle") == "idle");
  CHECK(end_reason_label("server shutdown") == "shutdown");
  CHECK(end_reason_label("sandbox exited: Chromium killed by signal 9 (Killed)") ==
        "sandbox_exited");
  CHECK(end_reason_label("ses_abc something") == "other");
  CHECK(escape_label_value("a\"b") == "a\\\"b");
}

TEST_CASE("the process registry declares cabind's families") {
  const std::string text = registry().exposition();
  for (const char* family :
       {"cabin_sessions", "cabin_session_creates_total", "cabin_session_create_seconds",
        "cabin_connections", "cabin_egress_decisions_total"}) {
    CHECK_THAT(text, Catch::Contains(std::string("# TYPE ") + family + " "));
  }
}

}  // namespace
