// Computer-use on cabind's side of the wire: screenshot queries checked before they reach the
// agent, and the agent's (hostile) answers to a batch checked and mapped back to the client's
// coordinate space.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/computer_actions.h"
#include "common/result.h"

namespace cabin::api {

// Images the agent may return, decoded size; base64 in JSON is 4/3 of it.
inline constexpr int64_t kMaxImageDim = computer::kMaxScreenDim;

// The most bytes an encoded PNG or JPEG of width x height pixels takes: never more than its raw
// RGBA pixels plus headers. Agent answers are bounded by it, so a lying agent cannot make cabind
// buffer more than the image it was asked for.
int64_t image_bytes_limit(int64_t width, int64_t height);

// The agent's query for a screenshot and the size of the image it will return.
struct ShotQuery {
  std::string query;
  int64_t width = 0;
  int64_t height = 0;
};
Result<ShotQuery> screenshot_query(const std::map<std::string, std::string>& query,
                                   computer::ScreenSize screen);

// GET /v1/sessions/{id}/screenshot query → the agent's query. Accepts format=png|jpeg,
// quality=1..100, scale=(0,1] or width+height, region x+y+w+h inside the screen, cursor=0|1.
Result<std::string> screenshot_agent_query(const std::map<std::string, std::string>& query,
                                           computer::ScreenSize screen);

struct FramesQuery {
  std::string agent_query;  // for /agent/v1/frames; equal queries share one stream
  std::string format;       // "png" or "jpeg"
  int fps = 0;
};

// GET /v1/sessions/{id}/frames query: the screenshot's parameters (format defaults to jpeg
// here) plus fps=1..60 (default 15); `token` is skipped. `mjpeg`: the format must be jpeg.
Result<FramesQuery> frames_agent_query(const std::map<std::string, std::string>& query,
                                       computer::ScreenSize screen, bool mjpeg);

// The agent's answer to POST /agent/v1/computer (status 200 or 422) for a batch of
// `actions` actions. Keeps only documented fields, checks types and bounds, and turns
// cursor positions into the client's model space. Returns the body for the client.
Result<nlohmann::json> check_computer_answer(std::string_view body, size_t actions,
                                             computer::ScreenSize screen,
                                             std::optional<computer::Size> model);

// The most an honest answer to `batch` can be: its screenshots in base64, and the rest.
size_t computer_answer_limit(const computer::Batch& batch, computer::ScreenSize screen);

// An upper bound on how long the agent may take for `batch`: its waits, holds and paced typing
// plus a fixed allowance.
int64_t computer_budget_ms(const computer::Batch& batch);

}  // namespace cabin::api
