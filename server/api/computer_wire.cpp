#include "server/api/computer_wire.h"

#include <charconv>
#include <cmath>
#include <tuple>
#include <utility>

#include "common/bounded_json.h"
#include "common/frame_stream.h"

namespace cabin::api {
namespace {

using nlohmann::json;

Error bad_query(const std::string& what) {
  return make_error(Errc::kInvalidArgument, "bad_query", what);
}

Error bad_agent(const std::string& what) {
  return make_error(Errc::kBadGateway, "agent_error", "computer answer from the agent: " + what);
}

bool to_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 9) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool is_base64(const std::string& s) {
  for (char c : s) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/' || c == '=';
    if (!ok) return false;
  }
  return true;
}

// {"media_type","data","width","height"} from the guest, checked.
Result<json> check_image(const json& in) {
  if (!in.is_object()) return bad_agent("image is not an object");
  auto mt = in.find("media_type");
  auto data = in.find("data");
  auto w = in.find("width");
  auto h = in.find("height");
  if (mt == in.end() || !mt->is_string() || data == in.end() || !data->is_string() ||
      w == in.end() || !w->is_number_integer() || h == in.end() || !h->is_number_integer()) {
    return bad_agent("image fields missing or mistyped");
  }
  const auto& type = mt->get_ref<const std::string&>();
  if (type != "image/png" && type != "image/jpeg") return bad_agent("unknown image type");
  int64_t width = w->get<int64_t>(), height = h->get<int64_t>();
  if (width < 1 || height < 1 || width > kMaxImageDim || height > kMaxImageDim) {
    return bad_agent("image size out of range");
  }
  if (!is_base64(data->get_ref<const std::string&>())) return bad_agent("image data not base64");
  return json{{"media_type", type}, {"data", *data}, {"width", width}, {"height", height}};
}

}  // namespace

int64_t image_bytes_limit(int64_t width, int64_t height) { return width * height * 4 + 64 * 1024; }

size_t computer_answer_limit(const computer::Batch& batch, computer::ScreenSize screen) {
  auto base64 = [](int64_t bytes) { return static_cast<size_t>((bytes + 2) / 3 * 4); };
  size_t total = 64 * 1024 + batch.actions.size() * 256;  // ops, cursor positions, an error
  for (const auto& a : batch.actions) {
    const auto* shot = std::get_if<computer::Screenshot>(&a);
    if (!shot) continue;
    int64_t w = screen.width, h = screen.height;
    if (shot->region) std::tie(w, h) = std::pair(shot->region->width, shot->region->height);
    if (shot->size) std::tie(w, h) = std::pair(shot->size->width, shot->size->height);
    total += base64(image_bytes_limit(w, h));
  }
  // The closing screenshot is of the screen, or of the smaller model size.
  if (batch.screenshot_after) total += base64(image_bytes_limit(screen.width, screen.height));
  return total;
}

Result<std::string> screenshot_agent_query(const std::map<std::string, std::string>& query,
                                           computer::ScreenSize screen) {
  auto q = screenshot_query(query, screen);
  if (!q) return q.error();
  return std::move(q->query);
}

Result<ShotQuery> screenshot_query(const std::map<std::string, std::string>& query,
                                   computer::ScreenSize screen) {
  std::string format = "png";
  int64_t quality = 80;
  std::optional<int64_t> width, height, x, y, w, h;
  std::optional<double> scale;
  bool cursor = false;
  for (const auto& [k, v] : query) {
    int64_t n = 0;
    if (k == "format") {
      if (v != "png" && v != "jpeg") return bad_query("format must be png or jpeg");
      format = v;
    } else if (k == "cursor") {
      if (v != "0" && v != "1") return bad_query("cursor must be 0 or 1");
      cursor = v == "1";
    } else if (k == "scale") {
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (v.empty() || v.size() > 12 || end != v.c_str() + v.size() || !(d > 0 && d <= 1)) {
        return bad_query("scale must be a number in (0, 1]");
      }
      scale = d;
    } else if (k == "quality" || k == "width" || k == "height" || k == "x" || k == "y" ||
               k == "w" || k == "h") {
      if (!to_int(v, n)) return bad_query(k + " must be an integer");
      if (k == "quality") {
        if (n < 1 || n > 100) return bad_query("quality must be 1..100");
        quality = n;
      }
      if (k == "width") width = n;
      if (k == "height") height = n;
      if (k == "x") x = n;
      if (k == "y") y = n;
      if (k == "w") w = n;
      if (k == "h") h = n;
    } else {
      return bad_query("unknown parameter \"" + k.substr(0, 32) + "\"");
    }
  }
  int64_t rw = screen.width, rh = screen.height;
  std::string out = "format=" + format + "&quality=" + std::to_string(quality) +
                    "&cursor=" + (cursor ? "1" : "0");
  bool any_region = x || y || w || h;
  if (any_region) {
    if (!(x && y && w && h)) return bad_query("a region needs x, y, w and h");
    if (*x < 0 || *y < 0 || *w < 1 || *h < 1 || *x + *w > screen.width || *y + *h > screen.height) {
      return bad_query("the region must lie inside the " + std::to_string(screen.width) + "x" +
                       std::to_string(screen.height) + " screen");
    }
    rw = *w;
    rh = *h;
    out += "&x=" + std::to_string(*x) + "&y=" + std::to_string(*y) + "&w=" + std::to_string(*w) +
           "&h=" + std::to_string(*h);
  }
  if (scale && (width || height)) return bad_query("give scale or width and height, not both");
  if (width.has_value() != height.has_value()) return bad_query("give width and height together");
  if (scale) {
    width = std::max<int64_t>(1, std::llround(static_cast<double>(rw) * *scale));
    height = std::max<int64_t>(1, std::llround(static_cast<double>(rh) * *scale));
  }
  if (width) {
    if (*width < 1 || *height < 1 || *width > kMaxImageDim || *height > kMaxImageDim) {
      return bad_query("width and height must be 1.." + std::to_string(kMaxImageDim));
    }
    out += "&width=" + std::to_string(*width) + "&height=" + std::to_string(*height);
  }
  return ShotQuery{std::move(out), width.value_or(rw), height.value_or(rh)};
}

Result<FramesQuery> frames_agent_query(const std::map<std::string, std::string>& query,
                                       computer::ScreenSize screen, bool mjpeg) {
  std::map<std::string, std::string> shot = query;
  shot.erase("token");
  FramesQuery out;
  out.fps = frames::kDefaultFps;
  if (auto it = shot.find("fps"); it != shot.end()) {
    int64_t n = 0;
    if (!to_int(it->second, n) || n < 1 || n > frames::kMaxFps) {
      return bad_query("fps must be an integer in 1.." + std::to_string(frames::kMaxFps));
    }
    out.fps = static_cast<int>(n);
    shot.erase(it);
  }
  auto [format, inserted] = shot.try_emplace("format", "jpeg");
  if (mjpeg && format->second != "jpeg") return bad_query("an MJPEG stream is JPEG only");
  auto q = screenshot_agent_query(shot, screen);
  if (!q) return q.error();
  out.agent_query = *q + "&fps=" + std::to_string(out.fps);
  out.format = format->second;
  return out;
}

Result<json> check_computer_answer(std::string_view body, size_t actions,
                                   computer::ScreenSize screen,
                                   std::optional<computer::Size> model) {
  // The body was bounded by computer_answer_limit.
  auto parsed = parse_bounded(body, {body.size(), kGuestJsonDepth, 16 * actions + 64});
  if (!parsed) return bad_agent(parsed.error().message);
  const json& in = *parsed;
  if (!in.is_object()) return bad_agent("not a JSON object");
  auto results = in.find("results");
  if (results == in.end() || !results->is_array() || results->size() > actions) {
    return bad_agent("results missing or too many");
  }
  std::optional<computer::Scaler> scaler;
  if (model) {
    auto s = computer::Scaler::make(*model, screen);
    if (!s) return s.error();
    scaler = *s;
  }
  json out = {{"results", json::array()}};
  for (const auto& r : *results) {
    if (!r.is_object() || !r.contains("op") || !r["op"].is_string() ||
        r["op"].get_ref<const std::string&>().size() > 32) {
      return bad_agent("a result lacks its op");
    }
    const auto& op = r["op"].get_ref<const std::string&>();
    json e = {{"op", op}};
    if (op == "cursor_position") {
      if (!r.contains("x") || !r.contains("y") || !r["x"].is_number_integer() ||
          !r["y"].is_number_integer()) {
        return bad_agent("cursor_position lacks x and y");
      }
      computer::Point p{r["x"].get<int64_t>(), r["y"].get<int64_t>()};
      if (p.x < 0 || p.y < 0 || p.x >= screen.width || p.y >= screen.height) {
        return bad_agent("cursor position outside the screen");
      }
      if (scaler) p = scaler->to_model(p);
      e["x"] = p.x;
      e["y"] = p.y;
    } else if (op == "screenshot") {
      auto img = check_image(r);
      if (!img) return img.error();
      e.update(*img);
    } else if (op == "upload") {
      auto files = r.find("files");
      if (files == r.end() || !files->is_number_unsigned() || files->get<uint64_t>() == 0 ||
          files->get<uint64_t>() > computer::kMaxUploadFiles)
        return bad_agent("upload lacks its count of files");
      e["files"] = *files;
    }
    out["results"].push_back(std::move(e));
  }
  if (auto shot = in.find("screenshot"); shot != in.end()) {
    auto img = check_image(*shot);
    if (!img) return img.error();
    out["screenshot"] = *img;
  }
  if (auto err = in.find("error"); err != in.end()) {
    if (!err->is_object() || !err->contains("index") || !(*err)["index"].is_number_integer()) {
      return bad_agent("error lacks its index");
    }
    int64_t index = (*err)["index"].get<int64_t>();
    if (index < 0 || static_cast<size_t>(index) >= actions) return bad_agent("error index");
    auto text = [&](const char* k) {
      auto it = err->find(k);
      return it != err->end() && it->is_string() ? it->get<std::string>().substr(0, 1024)
                                                 : std::string();
    };
    out["error"] = {{"index", index},
                    {"op", text("op")},
                    {"code", text("code").empty() ? "action_failed" : text("code")},
                    {"message", text("message")}};
  }
  return out;
}

int64_t computer_budget_ms(const computer::Batch& batch) {
  int64_t ms = 60000;
  for (const auto& a : batch.actions) {
    if (auto* w = std::get_if<computer::Wait>(&a)) ms += w->duration_ms;
    if (auto* h = std::get_if<computer::Hold>(&a)) ms += h->duration_ms;
    if (auto* t = std::get_if<computer::TypeText>(&a)) {
      ms += t->delay_ms * static_cast<int64_t>(t->text.size());
    }
  }
  return ms;
}

}  // namespace cabin::api
