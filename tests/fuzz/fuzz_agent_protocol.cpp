// Fuzz target: exec, navigate, restored and recording requests and file paths from clients;
// exec answers, browser states, browser events, directory listings and recording statuses from
// the (hostile) guest; the clipboard both ways; and the restore line the guest's root helper
// reads from its agent.
#include <cstdint>
#include <string>
#include <string_view>

#include "common/agent_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto req = cabin::agent_protocol::parse_exec_request(in);
  if (req && req->argv.empty()) __builtin_trap();
  auto nav = cabin::agent_protocol::parse_navigate_request(in);
  if (nav && (nav->url.empty() || nav->url.size() > cabin::agent_protocol::kMaxNavigateUrl))
    __builtin_trap();
  auto state = cabin::agent_protocol::parse_browser_state(in);
  if (state && ((*state)["urls"].size() > cabin::agent_protocol::kMaxStatePages ||
                (*state)["cookies"].size() > cabin::agent_protocol::kMaxStateCookies)) {
    __builtin_trap();
  }
  auto restored = cabin::agent_protocol::parse_restored_request(in);
  if (restored && (restored->machine_id.size() != 32 ||
                   restored->seed_hex.size() != 2 * cabin::agent_protocol::kRestoreSeedBytes))
    __builtin_trap();
  auto line = cabin::agent_protocol::parse_restore_line(in);
  if (line && line->seed.size() != cabin::agent_protocol::kRestoreSeedBytes) __builtin_trap();
  auto res = cabin::agent_protocol::parse_exec_result(in, 64);
  if (res && res->stdout_data.size() > 64 * 3 + 16) __builtin_trap();
  namespace ap = cabin::agent_protocol;
  auto clip = ap::parse_clipboard(in);
  if (clip && clip->size() > ap::kMaxClipboardBytes) __builtin_trap();
  auto ev = ap::parse_browser_event(in);
  if (ev && (ev->seq == 0 || ev->type.empty() || ev->fields.contains("seq"))) __builtin_trap();
  auto list = ap::parse_dir_listing(in);
  if (list && list->size() > ap::kMaxDirEntries) __builtin_trap();
  if (list) {
    for (const auto& e : *list)
      if (e.name.empty() || e.name.find('/') != std::string::npos) __builtin_trap();
  }
  auto rec = ap::parse_recording_request(in);
  if (rec && (!ap::valid_recording_id(rec->id) || rec->fps < 1 || rec->fps > ap::kMaxRecordingFps))
    __builtin_trap();
  auto st = ap::parse_recording_status(in);
  if (st && (st->state.empty() || st->seconds < 0)) __builtin_trap();
  auto path = ap::check_file_path(in);
  if (path && (path->empty() || (*path)[0] != '/' || path->find("/../") != std::string::npos ||
               path->size() > ap::kMaxFilePath))
    __builtin_trap();
  return 0;
}
