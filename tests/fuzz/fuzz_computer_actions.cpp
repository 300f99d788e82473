// Fuzz target: computer-use requests from clients (three vocabularies) and the agent's wire form.
#include <cstdint>
#include <string_view>
#include <variant>

#include "common/computer_actions.h"

namespace {

using namespace cabin::computer;

bool inside(const Point& p, Size s) {
  return p.x >= 0 && p.y >= 0 && p.x < s.width && p.y < s.height;
}

// Everything a parsed request holds is in screen space and within the limits.
void check(const Batch& b, Size screen) {
  if (b.actions.empty() || b.actions.size() > kMaxActions) __builtin_trap();
  int64_t waited = 0;
  for (const auto& a : b.actions) {
    if (auto* m = std::get_if<Move>(&a); m && !inside(m->to, screen)) __builtin_trap();
    if (auto* c = std::get_if<Click>(&a); c && c->at && !inside(*c->at, screen)) __builtin_trap();
    if (auto* d = std::get_if<Drag>(&a)) {
      if (d->path.size() < 2 || d->path.size() > kMaxDragPoints) __builtin_trap();
      for (auto p : d->path) {
        if (!inside(p, screen)) __builtin_trap();
      }
    }
    if (auto* s = std::get_if<Screenshot>(&a); s && s->region) {
      const Rect& r = *s->region;
      if (r.x < 0 || r.y < 0 || r.width < 1 || r.height < 1 || r.x + r.width > screen.width ||
          r.y + r.height > screen.height) {
        __builtin_trap();
      }
    }
    if (auto* t = std::get_if<TypeText>(&a); t && t->text.size() > kMaxTextBytes) __builtin_trap();
    if (auto* w = std::get_if<Wait>(&a)) waited += w->duration_ms;
    if (auto* h = std::get_if<Hold>(&a)) waited += h->duration_ms;
  }
  if (waited > kMaxBatchWaitMs) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (Size screen : {Size{1920, 1080}, Size{1366, 768}}) {
    auto b = parse_request(in, Limits{}, screen, Size{1280, 720});
    if (!b) continue;
    check(*b, screen);
    // cabind must never send what the agent refuses, and the agent must read it back unchanged.
    auto wire = parse_superset_batch(to_json(*b).dump(), screen);
    if (!wire || !(*wire == *b)) __builtin_trap();
  }
  if (auto w = parse_superset_batch(in, {1920, 1080}); w) check(*w, {1920, 1080});
  return 0;
}
