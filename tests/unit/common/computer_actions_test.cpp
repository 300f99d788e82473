#include "common/computer_actions.h"

#include <catch2/catch.hpp>
#include <string>

using namespace cabin;
using namespace cabin::computer;
using nlohmann::json;

namespace {

// The model sees 1280x720 on a 1920x1080 screen: 1.5 screen pixels per model pixel, so model
// (x, y) lands on screen (floor(1.5x + 0.75), floor(1.5y + 0.75)).
constexpr ScreenSize kScreen{1920, 1080};
constexpr Size kModel{1280, 720};

Batch parse_ok(const std::string& body, std::optional<Size> model = kModel,
               const Limits& limits = {}) {
  auto r = parse_request(body, limits, kScreen, model);
  INFO(body);
  INFO((r ? std::string() : r.error().message));
  REQUIRE(r);
  return *r;
}

template <typename T>
T one(const std::string& body, std::optional<Size> model = kModel) {
  Batch b = parse_ok(body, model);
  INFO(body);
  REQUIRE(b.actions.size() == 1);
  REQUIRE(std::holds_alternative<T>(b.actions[0]));
  return std::get<T>(b.actions[0]);
}

Error error_of(const std::string& body, std::optional<Size> model = kModel,
               const Limits& limits = {}) {
  auto r = parse_request(body, limits, kScreen, model);
  INFO(body);
  REQUIRE_FALSE(r);
  CHECK(r.error().errc == Errc::kInvalidArgument);
  return r.error();
}

// What cabind sends is exactly what the agent reads back.
void check_wire_round_trip(const Batch& b) {
  auto wire = to_json(b).dump();
  auto back = parse_superset_batch(wire, kScreen);
  INFO(wire);
  INFO((back ? std::string() : back.error().message));
  REQUIRE(back);
  CHECK(*back == b);
}

}  // namespace

TEST_CASE("scaling: corners, centre and exact values at 1.5x") {
  auto s = Scaler::make(kModel, kScreen);
  REQUIRE(s);
  CHECK(s->to_screen({0, 0}) == Point{0, 0});
  CHECK(s->to_screen({1, 1}) == Point{2, 2});
  CHECK(s->to_screen({1279, 719}) == Point{1919, 1079});
  CHECK(s->to_screen({640, 360}) == Point{960, 540});
  CHECK(s->to_model({1919, 1079}) == Point{1279, 719});
  CHECK(s->to_model({960, 540}) == Point{640, 360});
  CHECK(s->rect_to_screen({0, 0, 1280, 720}) == Rect{0, 0, 1920, 1080});
  CHECK(s->rect_to_screen({1, 1, 1, 1}) == Rect{2, 2, 1, 1});  // edges 1.5 and 3 round to 2, 3
  CHECK(s->dx_to_screen(100) == 150);
  CHECK(s->dy_to_screen(-100) == -150);
  CHECK(s->dx_to_screen(1) == 2);
  CHECK(s->dx_to_screen(-1) == -2);
  CHECK(s->dx_to_screen(0) == 0);
}

TEST_CASE("scaling round-trips every model pixel at two resolutions") {
  struct Case {
    Size model;
    Size screen;
  };
  for (auto c : {Case{{1280, 720}, {1920, 1080}}, Case{{1024, 768}, {1366, 768}},
                 Case{{1366, 768}, {2560, 1600}}, Case{{1, 1}, {16384, 16384}},
                 Case{{800, 600}, {800, 600}}}) {
    auto s = Scaler::make(c.model, c.screen);
    REQUIRE(s);
    for (int64_t x = 0; x < c.model.width; ++x) {
      Point p = s->to_screen({x, 0});
      REQUIRE(p.x >= 0);
      REQUIRE(p.x < c.screen.width);
      REQUIRE(s->to_model(p).x == x);
    }
    for (int64_t y = 0; y < c.model.height; ++y) {
      Point p = s->to_screen({0, y});
      REQUIRE(p.y < c.screen.height);
      REQUIRE(s->to_model(p).y == y);
    }
    // Every screen pixel answers a model pixel inside the model.
    for (int64_t x = 0; x < c.screen.width; ++x) {
      int64_t m = s->to_model({x, 0}).x;
      REQUIRE(m >= 0);
      REQUIRE(m < c.model.width);
    }
    CHECK(s->rect_to_screen({0, 0, c.model.width, c.model.height}) ==
          Rect{0, 0, c.screen.width, c.screen.height});
  }
  CHECK(Scaler::make({1024, 768}, {1366, 768})->to_screen({1023, 767}) == Point{1365, 767});
  CHECK(Scaler::make({1024, 768}, {1366, 768})->to_screen({512, 384}) == Point{683, 384});
  CHECK_FALSE(Scaler::make({1920, 1080}, {1280, 720}));  // a model larger than the screen
  CHECK_FALSE(Scaler::make({1280, 1081}, {1920, 1080}));
  CHECK_FALSE(Scaler::make({0, 720}, {1920, 1080}));
  CHECK_FALSE(Scaler::make({100, 100}, {100000, 100}));
}

TEST_CASE("Anthropic actions translate to the superset in screen pixels") {
  CHECK(one<Screenshot>(R"({"action":"screenshot"})") ==
        Screenshot{std::nullopt, kModel, ImageFormat::kPng});
  CHECK(one<Screenshot>(R"({"action":"screenshot"})", std::nullopt) == Screenshot{});
  one<CursorPosition>(R"({"action":"cursor_position"})");
  CHECK(one<Move>(R"({"action":"mouse_move","coordinate":[100,200]})") == Move{{150, 300}, {}});

  CHECK(one<Click>(R"({"action":"left_click"})") == Click{std::nullopt, Button::kLeft, 1, {}});
  CHECK(one<Click>(R"({"action":"left_click","coordinate":[10,20]})") ==
        Click{Point{15, 30}, Button::kLeft, 1, {}});
  CHECK(one<Click>(R"({"action":"right_click","coordinate":[0,0]})") ==
        Click{Point{0, 0}, Button::kRight, 1, {}});
  CHECK(one<Click>(R"({"action":"middle_click"})").button == Button::kMiddle);
  CHECK(one<Click>(R"({"action":"double_click","coordinate":[1279,719]})") ==
        Click{Point{1919, 1079}, Button::kLeft, 2, {}});
  CHECK(one<Click>(R"({"action":"triple_click"})").count == 3);
  CHECK(one<Click>(R"({"action":"left_click","coordinate":[10,20],"text":"shift"})").modifiers ==
        std::vector{Modifier::kShift});
  CHECK(one<Click>(R"({"action":"left_click","text":"CTRL+Shift+cmd+option"})").modifiers ==
        std::vector{Modifier::kCtrl, Modifier::kShift, Modifier::kSuper, Modifier::kAlt});
  CHECK(one<Click>(R"({"action":"left_click","text":"ctrl+control"})").modifiers ==
        std::vector{Modifier::kCtrl});

  CHECK(
      one<Drag>(R"({"action":"left_click_drag","start_coordinate":[0,0],"coordinate":[10,20]})") ==
      Drag{{{0, 0}, {15, 30}}, Button::kLeft, {}});
  CHECK(one<MouseDown>(R"({"action":"left_mouse_down"})") == MouseDown{Button::kLeft, {}});
  CHECK(one<MouseUp>(R"({"action":"left_mouse_up","coordinate":[10,20]})") ==
        MouseUp{Button::kLeft, Point{15, 30}});
  CHECK(one<TypeText>(R"({"action":"type","text":"héllo\nworld\t!"})") ==
        TypeText{"héllo\nworld\t!", 0});
  CHECK(one<Key>(R"({"action":"key","text":"ctrl+shift+t"})") == Key{{"ctrl", "shift", "t"}});
  CHECK(one<Key>(R"({"action":"key","text":"Return"})") == Key{{"Return"}});
  CHECK(one<Key>(R"({"action":"key","text":"ctrl++"})") == Key{{"ctrl", "+"}});

  // A space-separated sequence is several chords in order.
  Batch seq = parse_ok(R"({"action":"key","text":"ctrl+a  Delete"})");
  REQUIRE(seq.actions.size() == 2);
  CHECK(std::get<Key>(seq.actions[0]) == Key{{"ctrl", "a"}});
  CHECK(std::get<Key>(seq.actions[1]) == Key{{"Delete"}});

  CHECK(one<Hold>(R"({"action":"hold_key","text":"shift","duration":1.5})") ==
        Hold{{"shift"}, 1500});
  CHECK(one<Hold>(R"({"action":"hold_key","text":"ctrl+alt","duration":2})") ==
        Hold{{"ctrl", "alt"}, 2000});
  CHECK(
      one<Scroll>(
          R"({"action":"scroll","coordinate":[10,20],"scroll_direction":"up","scroll_amount":3})") ==
      Scroll{Point{15, 30}, 0, -3, ScrollUnit::kNotch, {}});
  CHECK(one<Scroll>(R"({"action":"scroll","scroll_direction":"down","scroll_amount":5})") ==
        Scroll{std::nullopt, 0, 5, ScrollUnit::kNotch, {}});
  CHECK(one<Scroll>(
            R"({"action":"scroll","scroll_direction":"left","scroll_amount":2,"text":"shift"})") ==
        Scroll{std::nullopt, -2, 0, ScrollUnit::kNotch, {Modifier::kShift}});
  CHECK(one<Scroll>(R"({"action":"scroll","scroll_direction":"right","scroll_amount":100})").dx ==
        100);
  CHECK(one<Wait>(R"({"action":"wait","duration":0.25})") == Wait{250});
  CHECK(one<Wait>(R"({"action":"wait","duration":60})") == Wait{60000});
  // Zoom: the region's own screen pixels, not scaled back down.
  CHECK(one<Screenshot>(R"({"action":"zoom","region":[0,0,640,360]})") ==
        Screenshot{Rect{0, 0, 960, 540}, std::nullopt, ImageFormat::kPng});
  CHECK(one<Screenshot>(R"({"action":"zoom","region":[640,360,1280,720]})").region ==
        Rect{960, 540, 960, 540});
}

TEST_CASE("OpenAI actions translate to the superset in screen pixels") {
  CHECK(one<Click>(R"({"type":"click","x":10,"y":20,"button":"left"})") ==
        Click{Point{15, 30}, Button::kLeft, 1, {}});
  CHECK(one<Click>(R"({"type":"click","x":10,"y":20,"button":"right"})").button == Button::kRight);
  CHECK(one<Click>(R"({"type":"click","x":10,"y":20,"button":"wheel"})").button == Button::kMiddle);
  CHECK(one<Click>(R"({"type":"click","x":10,"y":20,"button":"back"})").button == Button::kBack);
  CHECK(one<Click>(R"({"type":"click","x":10,"y":20,"button":"forward"})").button ==
        Button::kForward);
  CHECK(
      one<Click>(R"({"type":"click","x":10,"y":20,"button":"left","keys":["SHIFT"]})").modifiers ==
      std::vector{Modifier::kShift});
  CHECK(one<Click>(R"({"type":"click","x":10,"y":20,"button":"left","keys":null})")
            .modifiers.empty());
  CHECK(one<Click>(R"({"type":"double_click","x":1279,"y":719})") ==
        Click{Point{1919, 1079}, Button::kLeft, 2, {}});
  CHECK(one<Scroll>(R"({"type":"scroll","x":10,"y":20,"scroll_x":0,"scroll_y":-100})") ==
        Scroll{Point{15, 30}, 0, -150, ScrollUnit::kPixel, {}});
  CHECK(one<TypeText>(R"({"type":"type","text":"hi"})") == TypeText{"hi", 0});
  CHECK(one<Key>(R"({"type":"keypress","keys":["CTRL","L"]})") == Key{{"ctrl", "l"}});
  CHECK(one<Key>(R"({"type":"keypress","keys":["ENTER"]})") == Key{{"Return"}});
  CHECK(one<Key>(R"({"type":"keypress","keys":["A"]})") == Key{{"A"}});
  CHECK(one<Key>(R"({"type":"keypress","keys":["ESC"]})") == Key{{"Escape"}});
  CHECK(one<Key>(R"({"type":"keypress","keys":["ARROWLEFT"]})") == Key{{"Left"}});
  CHECK(one<Key>(R"({"type":"keypress","keys":["BACKSPACE"]})") == Key{{"BackSpace"}});
  CHECK(one<Key>(R"({"type":"keypress","keys":["PAGEUP"]})") == Key{{"Prior"}});
  CHECK(one<Key>(R"({"type":"keypress","keys":["META","SHIFT","T"]})") ==
        Key{{"super", "shift", "t"}});
  CHECK(one<Drag>(R"({"type":"drag","path":[{"x":0,"y":0},{"x":10,"y":20},{"x":1279,"y":719}]})") ==
        Drag{{{0, 0}, {15, 30}, {1919, 1079}}, Button::kLeft, {}});
  CHECK(one<Move>(R"({"type":"move","x":100,"y":200})") == Move{{150, 300}, {}});
  CHECK(one<Wait>(R"({"type":"wait"})") == Wait{kOpenAiWaitMs});
  CHECK(one<Screenshot>(R"({"type":"screenshot"})").size == kModel);
}

TEST_CASE("superset ops parse, scale and survive to_json -> parse_superset_batch") {
  const std::string ops[] = {
      R"({"op":"move","x":10,"y":20})",
      R"({"op":"move","x":10,"y":20,"modifiers":["shift"]})",
      R"({"op":"click"})",
      R"({"op":"click","x":10,"y":20,"button":"right","count":3,"modifiers":["ctrl","alt"]})",
      R"({"op":"mouse_down","button":"middle","x":1,"y":2})",
      R"({"op":"mouse_up"})",
      R"({"op":"drag","path":[[0,0],[10,20],[30,40]],"button":"left","modifiers":["super"]})",
      R"({"op":"scroll","x":5,"y":5,"dx":-3,"dy":7,"unit":"notch","modifiers":["shift"]})",
      R"({"op":"scroll","dy":-100,"unit":"pixel"})",
      R"({"op":"type","text":"abc","delay_ms":12})",
      R"({"op":"key","chord":["Control","Shift","T"]})",
      R"({"op":"hold","keys":["shift"],"duration_ms":500})",
      R"({"op":"wait","duration_ms":1500})",
      R"({"op":"screenshot"})",
      R"({"op":"screenshot","region":{"x":10,"y":20,"width":100,"height":50},"format":"jpeg"})",
      R"({"op":"screenshot","size":{"width":640,"height":360}})",
      R"({"op":"cursor_position"})",
  };
  for (const auto& op : ops) {
    INFO(op);
    check_wire_round_trip(parse_ok(op));
    check_wire_round_trip(parse_ok(op, std::nullopt));
  }
  CHECK(
      one<Click>(
          R"({"op":"click","x":10,"y":20,"button":"right","count":3,"modifiers":["ctrl","alt"]})") ==
      Click{Point{15, 30}, Button::kRight, 3, {Modifier::kCtrl, Modifier::kAlt}});
  CHECK(one<Click>(R"({"op":"click"})") == Click{});
  CHECK(one<Drag>(R"({"op":"drag","path":[[0,0],[10,20]]})") ==
        Drag{{{0, 0}, {15, 30}}, Button::kLeft, {}});
  CHECK(one<Scroll>(R"({"op":"scroll","dy":-100,"unit":"pixel"})").dy == -150);
  CHECK(one<Scroll>(R"({"op":"scroll","dy":-100,"unit":"notch"})").dy == -100);
  CHECK(one<Key>(R"({"op":"key","chord":["Control","Shift","T"]})") == Key{{"ctrl", "shift", "T"}});
  CHECK(one<Screenshot>(R"({"op":"screenshot","region":{"x":10,"y":20,"width":100,"height":50}})")
            .region == Rect{15, 30, 150, 75});
  CHECK(one<Screenshot>(R"({"op":"screenshot","size":{"width":640,"height":360}})").size ==
        Size{640, 360});

  // A whole batch, every vocabulary mixed, with a declared display.
  Batch b = parse_ok(R"({"actions":[{"action":"left_click","coordinate":[1,1]},
                                     {"type":"keypress","keys":["CTRL","A"]},
                                     {"op":"type","text":"x"},
                                     {"action":"key","text":"ctrl+c ctrl+v"}],
                        "screenshot_after":true,"display":{"width":1280,"height":720}})",
                     std::nullopt);
  CHECK(b.screenshot_after);
  CHECK(b.model_size == kModel);
  REQUIRE(b.actions.size() == 5);
  CHECK(std::get<Click>(b.actions[0]).at == Point{2, 2});
  check_wire_round_trip(b);

  // The agent's side is strict too.
  for (const char* bad : {R"({"actions":[{"action":"screenshot"}]})",
                          R"({"actions":[{"op":"click","x":1920,"y":0}]})",
                          R"({"actions":[{"op":"click"}],"display":{"width":1,"height":1}})",
                          R"({"actions":[{"op":"click"}],"model_size":{"width":4000,"height":1}})",
                          R"({"actions":[]})", R"({"screenshot_after":true})"}) {
    INFO(bad);
    CHECK_FALSE(parse_superset_batch(bad, kScreen));
  }
  auto single = parse_superset(json::parse(R"({"op":"wait","duration_ms":5})"), kScreen);
  REQUIRE(single);
  CHECK(std::get<Wait>(*single) == Wait{5});
  CHECK_FALSE(parse_superset(json::parse(R"({"action":"wait","duration":5})"), kScreen));
}

TEST_CASE("coordinates outside the model's screen are errors naming the index") {
  auto e = error_of(R"({"actions":[{"action":"screenshot"},{"action":"screenshot"},
      {"action":"screenshot"},{"action":"left_click","coordinate":[1280,5]}]})");
  CHECK(e.message == "actions[3].coordinate: must be [x, y] inside 1280x720");
  CHECK(error_of(R"({"action":"mouse_move","coordinate":[-1,5]})").message ==
        "coordinate: must be [x, y] inside 1280x720");
  CHECK(error_of(R"({"type":"click","x":5,"y":720,"button":"left"})").message ==
        "y: must be an integer from 0 to 719 (display 1280x720)");
  CHECK(error_of(R"({"actions":[{"type":"drag","path":[{"x":0,"y":0},{"x":1e3,"y":0}]}]})")
            .message.rfind("actions[0].path[1].x:", 0) == 0);
  CHECK(error_of(R"({"actions":[{"op":"drag","path":[[0,0],[0,720]]}]})").message ==
        "actions[0].path[1]: must be [x, y] inside 1280x720");
  CHECK(error_of(R"({"action":"zoom","region":[0,0,1281,10]})").message.rfind("region:", 0) == 0);
  CHECK(error_of(R"({"action":"zoom","region":[10,0,10,10]})").message.rfind("region:", 0) == 0);
  CHECK(error_of(R"({"op":"screenshot","region":{"x":1200,"y":0,"width":81,"height":1}})")
            .message.rfind("region:", 0) == 0);
  // Without a declared display the screen itself bounds the coordinates.
  CHECK(one<Click>(R"({"action":"left_click","coordinate":[1919,1079]})", std::nullopt).at ==
        Point{1919, 1079});
  CHECK(error_of(R"({"action":"left_click","coordinate":[1920,0]})", std::nullopt).message ==
        "coordinate: must be [x, y] inside 1920x1080");
  // A display larger than the screen is refused rather than scaled down.
  CHECK(error_of(R"({"actions":[{"action":"screenshot"}],"display":{"width":2560,"height":1440}})")
            .message.find("larger than the screen") != std::string::npos);
  CHECK(error_of(R"({"actions":[{"action":"screenshot"}],"display":{"width":0,"height":10}})")
            .message.rfind("display.width", 0) == 0);
}

TEST_CASE("every limit gives a clear error") {
  auto limit = [](const std::string& body, const std::string& starts) {
    auto e = error_of(body);
    INFO(e.message);
    CHECK(e.code == "limit_exceeded");
    CHECK(e.message.rfind(starts, 0) == 0);
  };
  std::string big(10 * 1024 * 1024, 'a');
  limit(R"({"action":"type","text":")" + big + "\"}", "text: is 10485760 bytes");
  limit(R"({"actions":[{"type":"type","text":")" + std::string(kMaxTextBytes + 1, 'a') + "\"}]}",
        "actions[0].text:");
  CHECK(one<TypeText>(R"({"action":"type","text":")" + std::string(kMaxTextBytes, 'a') + "\"}")
            .text.size() == kMaxTextBytes);
  limit(R"({"action":"wait","duration":36000})", "duration: must be at most 60 s");
  limit(R"({"action":"wait","duration":60.001})", "duration:");
  limit(R"({"action":"hold_key","text":"shift","duration":61})", "duration:");
  limit(R"({"op":"wait","duration_ms":60001})", "duration_ms:");
  limit(R"({"op":"hold","keys":["a"],"duration_ms":99999999999999})", "duration_ms:");
  limit(R"({"op":"type","text":")" + std::string(61, 'a') + R"(","delay_ms":1000})", "delay_ms:");

  json many = {{"actions", json::array()}};
  for (int i = 0; i < 100000; ++i) many["actions"].push_back({{"action", "screenshot"}});
  limit(many.dump(), "actions: has 100000 actions; at most 1000");
  json max = {{"actions", json::array()}};
  for (size_t i = 0; i < kMaxActions; ++i) max["actions"].push_back({{"type", "screenshot"}});
  CHECK(parse_ok(max.dump()).actions.size() == kMaxActions);
  // Key sequences expand, and the expanded batch is what counts.
  max["actions"][999] = {{"action", "key"}, {"text", "a b"}};
  limit(max.dump(), "actions[999]: the batch expands to more than 1000");

  json waits = {{"actions", json::array()}};
  for (int i = 0; i < 6; ++i) waits["actions"].push_back({{"action", "wait"}, {"duration", 60}});
  limit(waits.dump(), "actions[5]: the batch's waits add up to more than 300 s");
  waits["actions"].erase(5);
  CHECK(parse_ok(waits.dump()).actions.size() == 5);

  limit(R"({"action":"scroll","scroll_direction":"up","scroll_amount":101})", "scroll_amount:");
  limit(R"({"op":"scroll","dx":-101,"unit":"notch"})", "dx:");
  limit(R"({"type":"scroll","x":0,"y":0,"scroll_x":0,"scroll_y":100001})", "scroll_y:");
  limit(R"({"type":"scroll","x":0,"y":0,"scroll_x":-9223372036854775808,"scroll_y":0})",
        "scroll_x:");
  // 70000 model pixels are 105000 screen pixels: over the agent's bound, so refused here.
  limit(R"({"type":"scroll","x":0,"y":0,"scroll_x":0,"scroll_y":70000})", "scroll_y: is more");

  json path = json::array();
  for (size_t i = 0; i <= kMaxDragPoints; ++i) path.push_back({{"x", 1}, {"y", 1}});
  limit(json{{"type", "drag"}, {"path", path}}.dump(), "path: has 10001 points");
  path.erase(path.size() - 1);
  CHECK(one<Drag>(json{{"type", "drag"}, {"path", path}}.dump()).path.size() == kMaxDragPoints);

  std::string chords;
  for (size_t i = 0; i <= kMaxKeySequence; ++i) chords += "a ";
  limit(R"({"action":"key","text":")" + chords + "\"}", "text: has more than 16 chords");

  // Limits are a parameter: a server can tighten them.
  Limits tight;
  tight.max_actions = 2;
  auto e = error_of(R"({"actions":[{"op":"click"},{"op":"click"},{"op":"click"}]})", kModel, tight);
  CHECK(e.code == "limit_exceeded");
}

TEST_CASE("unknown actions, missing and wrong-typed parameters are per-field errors") {
  struct Bad {
    const char* body;
    const char* prefix;
  };
  for (auto [body, prefix] : std::initializer_list<Bad>{
           {R"({"action":"fly"})", "action: unknown Anthropic action \"fly\""},
           {R"({"type":"teleport"})", "type: unknown OpenAI action \"teleport\""},
           {R"({"op":"warp"})", "op: unknown op \"warp\""},
           {R"({"actions":[{"op":"click"},{"action":7}]})", "actions[1].action: must be a string"},
           {R"({"nothing":1})", "action: must have \"action\""},
           {R"({"actions":[1]})", "actions[0]: must be an object"},
           {R"({"actions":{}})", "actions: must be a non-empty array"},
           {R"({"actions":[]})", "actions: must be a non-empty array"},
           {R"({"actions":[{"op":"click"}],"screenshot_after":1})", "screenshot_after:"},
           {R"({"actions":[{"op":"click"}],"extra":1})", "unknown field \"extra\""},
           {R"({"action":"left_click","coordinate":[1,2],"button":"left"})",
            "unknown field \"button\""},
           {R"({"actions":[{"type":"click","x":1,"y":2,"button":"left","z":0}]})",
            "unknown field \"actions[0].z\""},
           {R"({"op":"click","count":4})", "count: must be between 1 and 3"},
           {R"({"action":"mouse_move"})", "coordinate: is required"},
           {R"({"action":"mouse_move","coordinate":"1,2"})", "coordinate: must be [x, y]"},
           {R"({"action":"mouse_move","coordinate":[1.5,2]})", "coordinate: must be [x, y]"},
           {R"({"action":"mouse_move","coordinate":[1,2,3]})", "coordinate: must be [x, y]"},
           {R"({"action":"left_click_drag","coordinate":[1,2]})", "start_coordinate: is required"},
           {R"({"action":"left_click","text":"a"})", "text: \"a\" is not a modifier"},
           {R"({"action":"type"})", "text: is required"},
           {R"({"action":"type","text":5})", "text: must be a string"},
           {R"({"action":"type","text":"a\u0000b"})", "text: contains a control character"},
           {R"({"action":"key","text":""})", "text: must name a key"},
           {R"({"action":"key","text":"ctrl+"})", "text: \"ctrl+\" ends with '+'"},
           {R"({"action":"key","text":"ctrl+a\u0001"})", "text: a key name contains a control"},
           {R"({"action":"key","text":"ctrl+no-such.key"})", "text: \"no-such.key\" is not a key"},
           {R"({"action":"hold_key","text":"shift"})", "duration: is required"},
           {R"({"action":"hold_key","text":"shift","duration":"1"})", "duration: must be a number"},
           {R"({"action":"wait","duration":-1})", "duration: must not be negative"},
           {R"({"action":"scroll","scroll_direction":"sideways","scroll_amount":1})",
            "scroll_direction:"},
           {R"({"action":"scroll","scroll_direction":"up"})", "scroll_amount: is required"},
           {R"({"action":"scroll","scroll_direction":"up","scroll_amount":-1})", "scroll_amount:"},
           {R"({"action":"zoom"})", "region: is required"},
           {R"({"type":"click","x":1,"y":2})", "button: is required"},
           {R"({"type":"click","x":1,"y":2,"button":"middle"})", "button: must be left, right"},
           {R"({"type":"click","y":2,"button":"left"})", "x: is required with y"},
           {R"({"type":"click","x":"1","y":2,"button":"left"})", "x: must be an integer"},
           {R"({"type":"click","x":1,"y":2,"button":"left","keys":["a"]})", "keys[0]:"},
           {R"({"type":"scroll","x":1,"y":2,"scroll_y":1})", "scroll_x: is required"},
           {R"({"type":"keypress","keys":[]})", "keys: must be an array of 1 to 16"},
           {R"({"type":"keypress","keys":"ctrl"})", "keys: must be an array"},
           {R"({"type":"keypress","keys":[""]})", "keys[0]: a key name is empty"},
           {R"({"type":"drag","path":[{"x":1,"y":1}]})", "path: must be an array of at least two"},
           {R"({"type":"drag","path":[{"x":1,"y":1},[2,2]]})", "path[1]: must be an {x, y}"},
           {R"({"type":"wait","ms":5})", "unknown field \"ms\""},
           {R"({"op":"move","x":1})", "y: is required with x"},
           {R"({"op":"click","button":"wheel"})", "button: must be left, middle"},
           {R"({"op":"click","modifiers":["shift","x"]})", "modifiers[1]: \"x\" is not a modifier"},
           {R"({"op":"drag","path":[[0,0]]})", "path: must be an array of at least two"},
           {R"({"op":"scroll","dy":1})", "unit: is required"},
           {R"({"op":"scroll","dy":1.5,"unit":"pixel"})", "dy: must be an integer"},
           {R"({"op":"type","text":"a","delay_ms":1001})", "delay_ms: must be between 0 and 1000"},
           {R"({"op":"key","chord":["a b"]})", "chord[0]: \"a b\" is not a key name"},
           {R"({"op":"key","chord":["a","b"],"x":1})", "unknown field \"x\""},
           {R"({"op":"hold","keys":["a"]})", "duration_ms: is required"},
           {R"({"op":"wait","duration_ms":-5})", "duration_ms: must be a non-negative integer"},
           {R"({"op":"screenshot","format":"gif"})", "format: must be png or jpeg"},
           {R"({"op":"screenshot","size":{"width":0,"height":1}})", "size.width:"},
           {R"({"op":"screenshot","size":{"width":1}})", "size.height: is required"},
           {R"({"op":"cursor_position","x":1})", "unknown field \"x\""},
           {R"({"op":1})", "op: must be a string"},
           {"[1]", "request body must be a JSON object"},
           {"{", "request body is not valid JSON"},
       }) {
    auto e = error_of(body);
    INFO(body);
    INFO(e.message);
    CHECK(e.message.rfind(prefix, 0) == 0);
  }
}

TEST_CASE("key names normalize to X keysym names") {
  struct Case {
    const char* in;
    const char* out;
  };
  for (auto [in, out] : std::initializer_list<Case>{
           {"ctrl", "ctrl"},
           {"Control", "ctrl"},
           {"CTRL", "ctrl"},
           {"alt", "alt"},
           {"option", "alt"},
           {"Shift", "shift"},
           {"super", "super"},
           {"cmd", "super"},
           {"META", "super"},
           {"win", "super"},
           {"ENTER", "Return"},
           {"Return", "Return"},
           {"ESC", "Escape"},
           {"ARROWLEFT", "Left"},
           {"ArrowRight", "Right"},
           {"up", "Up"},
           {"DOWN", "Down"},
           {"BACKSPACE", "BackSpace"},
           {"BackSpace", "BackSpace"},
           {"PAGEUP", "Prior"},
           {"Page_Up", "Prior"},
           {"PAGEDOWN", "Next"},
           {"Next", "Next"},
           {"DELETE", "Delete"},
           {"TAB", "Tab"},
           {"SPACE", "space"},
           {" ", "space"},
           {"HOME", "Home"},
           {"END", "End"},
           {"f5", "F5"},
           {"F12", "F12"},
           {"F35", "F35"},
           {"CAPSLOCK", "Caps_Lock"},
           {"a", "a"},
           {"A", "A"},
           {"+", "+"},
           {"é", "é"},
           {"KP_Enter", "KP_Enter"},
           {"XF86AudioPlay", "XF86AudioPlay"},
           {"Control_L", "Control_L"},
           {"F36", "F36"},
           {"minus", "minus"},
       }) {
    auto k = normalize_key(in);
    INFO(in);
    REQUIRE(k);
    CHECK(*k == out);
  }
  for (const char* bad : {"", "a b", "ctrl-a", "\t", "x\x01", "Ω≈"}) {
    INFO(bad);
    CHECK_FALSE(normalize_key(bad));
  }
  CHECK_FALSE(normalize_key(std::string(65, 'a')));
  CHECK(parse_chord("ctrl+shift+t").value() == std::vector<std::string>{"ctrl", "shift", "t"});
  CHECK(parse_chord("+").value() == std::vector<std::string>{"+"});
  CHECK(parse_chord("shift++").value() == std::vector<std::string>{"shift", "+"});
  CHECK_FALSE(parse_chord("a++b"));
  CHECK_FALSE(parse_chord("++"));
  CHECK_FALSE(parse_chord("a+b+c+d+e+f+g+h+i+j+k+l+m+n+o+p+q"));
}
