// The agent's query parsers for screenshots and frame streams, apart from the code that acts on
// them so that their fuzz target builds without the rest of the agent.
#include <algorithm>
#include <iterator>
#include <map>
#include <string>

#include "common/frame_stream.h"
#include "common/json_fields.h"
#include "vm-images/agent/desktop.h"
#include "vm-images/agent/frames.h"
#include "vm-images/agent/requests.h"

namespace cabin::agent {

Result<ShotSpec> parse_screenshot_query(std::string_view query) {
  std::map<std::string_view, std::string_view> params;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return invalid_request("query parameters must be name=value");
    std::string_view key = item.substr(0, eq);
    static constexpr std::string_view kKnown[] = {"format", "quality", "x",      "y",     "w",
                                                  "h",      "width",   "height", "cursor"};
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return invalid_request("unknown query parameter \"" + std::string(key.substr(0, 32)) + "\"");
    }
    if (!params.emplace(key, item.substr(eq + 1)).second) {
      return invalid_request("query parameter " + std::string(key) + " given twice");
    }
  }
  const int max_dim = static_cast<int>(computer::kMaxScreenDim);
  auto number = [&](std::string_view key, int min, int max) -> Result<std::optional<int>> {
    auto it = params.find(key);
    if (it == params.end()) return std::optional<int>();
    auto v = parse_decimal(it->second, static_cast<uint32_t>(min), static_cast<uint32_t>(max));
    if (!v) {
      return invalid_request(std::string(key) + " must be an integer in " + std::to_string(min) +
                             ".." + std::to_string(max));
    }
    return std::optional<int>(static_cast<int>(*v));
  };

  ShotSpec spec;
  if (auto it = params.find("format"); it != params.end()) {
    if (it->second == "png") {
      spec.format = computer::ImageFormat::kPng;
    } else if (it->second == "jpeg") {
      spec.format = computer::ImageFormat::kJpeg;
    } else {
      return invalid_request("format must be png or jpeg");
    }
  }
  auto quality = number("quality", 1, 100);
  if (!quality) return quality.error();
  if (*quality) spec.quality = **quality;
  auto cursor = number("cursor", 0, 1);
  if (!cursor) return cursor.error();
  spec.cursor = cursor->value_or(0) == 1;

  auto x = number("x", 0, max_dim - 1);
  auto y = number("y", 0, max_dim - 1);
  auto w = number("w", 1, max_dim);
  auto h = number("h", 1, max_dim);
  for (auto* r : {&x, &y, &w, &h}) {
    if (!*r) return r->error();
  }
  const int region_parts = (*x ? 1 : 0) + (*y ? 1 : 0) + (*w ? 1 : 0) + (*h ? 1 : 0);
  if (region_parts != 0 && region_parts != 4) return invalid_request("x, y, w and h go together");
  if (region_parts == 4) spec.region = vnc::Rect{**x, **y, **w, **h};

  auto width = number("width", 1, max_dim);
  auto height = number("height", 1, max_dim);
  if (!width) return width.error();
  if (!height) return height.error();
  if (width->has_value() != height->has_value()) {
    return invalid_request("width and height go together");
  }
  if (*width) spec.size = vnc::Size{**width, **height};
  return spec;
}

Result<FrameSpec> parse_frames_query(std::string_view query) {
  FrameSpec spec;
  std::string rest;
  bool have_fps = false;
  std::string_view q = query;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    std::string_view item = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (item.rfind("fps=", 0) != 0) {
      if (!rest.empty()) rest += '&';
      rest += item;
      continue;
    }
    std::string_view v = item.substr(4);
    if (have_fps) return invalid_request("query parameter fps given twice");
    have_fps = true;
    auto n = parse_decimal(v, 1, frames::kMaxFps);
    if (!n)
      return invalid_request("fps must be an integer in 1.." + std::to_string(frames::kMaxFps));
    spec.fps = static_cast<int>(*n);
  }
  auto shot = parse_screenshot_query(rest);
  if (!shot) return shot.error();
  spec.shot = *shot;
  return spec;
}

}  // namespace cabin::agent
