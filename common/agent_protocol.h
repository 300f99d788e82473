// Typed messages of the cabin-agent protocol (docs/agent-protocol.md), parsed strictly on both
// sides: cabind checks what clients send and what the guest answers; the agent checks cabind.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace cabin::agent_protocol {

// The line cabin-agent writes last to stderr when it exits because part of the desktop died or
// could not start ("cabin-agent failed: chromium killed by signal 9 (Killed)"); drivers turn it
// into the session's end reason.
inline constexpr char kAgentFailureLinePrefix[] = "cabin-agent failed: ";

// The RFB (VNC) server's port on the sandbox's loopback; cabind reaches it through the agent.
// The most pixels an image the agent makes may have (8192x4096 BGRX is 128 MiB already); a
// screen is never larger, so that a screenshot of it can always be taken.
inline constexpr int64_t kMaxImagePixels = int64_t{8192} * 4096;
inline constexpr uint16_t kRfbPort = 5900;
// The egress proxy's port on the sandbox's loopback: its programs' only way out.
inline constexpr uint16_t kEgressProxyPort = 3128;
// The agent's own port in a microVM guest (vm-images/guest/init), which cabind forwards to.
inline constexpr uint16_t kGuestAgentPort = 7000;

// The agent's endpoints: cabin-agent serves them, cabind's AgentClient alone calls them.
inline constexpr std::string_view kHealthPath = "/agent/v1/health";
inline constexpr std::string_view kExecPath = "/agent/v1/exec";
inline constexpr std::string_view kScreenshotPath = "/agent/v1/screenshot";
inline constexpr std::string_view kComputerPath = "/agent/v1/computer";
inline constexpr std::string_view kFramesPath = "/agent/v1/frames";
// Takes the browser's first page to a URL and answers once it got as far as asked: how a
// sandbox started ahead of its session (a warm pool's) reaches the session's start URL.
inline constexpr std::string_view kNavigatePath = "/agent/v1/navigate";
// Closes the browser the way a person would (CDP Browser.close), so that it writes its profile
// (cookies, storage) to disk, and answers once it has exited: how a session whose profile is kept
// ends. The agent and the desktop stay up.
inline constexpr std::string_view kBrowserClosePath = "/agent/v1/browser/close";
// GET: the browser's cookies and its pages' URLs; POST the same to give them to another browser
// (a fork of a session on a driver that cannot copy a running machine).
inline constexpr std::string_view kBrowserStatePath = "/agent/v1/browser/state";
inline constexpr size_t kMaxStateCookies = 10000;
inline constexpr size_t kMaxStatePages = 32;
inline constexpr size_t kMaxStateBytes = 4 * 1024 * 1024;
// A browser state's JSON checked as cabind and the agent take it: {"cookies": [objects],
// "urls": [http, https, data: or about: URLs, at most 4096 bytes each]}, within the limits.
Result<nlohmann::json> parse_browser_state(std::string_view body);
// The microVM's door out: cabind keeps GETs to this waiting; the agent answers one with
// kEgressPaired when a guest program connects to its egress port, and the connection carries
// that program's bytes from then on.
inline constexpr std::string_view kEgressWaitPath = "/agent/v1/egress/wait";
inline constexpr std::string_view kEgressPaired = "HTTP/1.1 200 Paired\r\n\r\n";
// Every request but a CONNECT's tunnelled bytes carries the session's agent secret here.
inline constexpr std::string_view kSecretHeader = "X-Cabin-Agent-Secret";

inline constexpr size_t kMaxArgs = 4096;
inline constexpr size_t kMaxArgBytes = 128 * 1024;
inline constexpr size_t kMaxEnv = 4096;
inline constexpr size_t kMaxStdin = 1024 * 1024;
inline constexpr int64_t kDefaultTimeoutMs = 30000;
inline constexpr int64_t kMaxTimeoutMs = 600000;
inline constexpr int64_t kDefaultOutputBytes = 1024 * 1024;
inline constexpr int64_t kMaxOutputBytes = 16 * 1024 * 1024;

struct ExecRequest {
  std::vector<std::string> argv;
  int64_t timeout_ms = kDefaultTimeoutMs;
  int64_t max_output_bytes = kDefaultOutputBytes;
  std::map<std::string, std::string> env;
  std::optional<std::string> cwd;    // unset: the agent's
  std::string stdin_data;
};

struct ExecResult {
  std::optional<int> exit_code;  // set when the command exited
  std::optional<int> signal;     // set when a signal ended it
  bool timed_out = false;
  std::string stdout_data;
  std::string stderr_data;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t duration_ms = 0;
};

Result<ExecRequest> parse_exec_request(std::string_view body);

inline constexpr size_t kMaxNavigateUrl = 4096;

// POST kNavigatePath: {"url": "...", "wait_until": "commit" | "load" | "networkidle"}.
struct NavigateRequest {
  std::string url;
  std::string wait_until = "load";
};
Result<NavigateRequest> parse_navigate_request(std::string_view body);
nlohmann::json to_json(const NavigateRequest& r);
nlohmann::json to_json(const ExecRequest& r);

// GET kClipboardPath answers {"text": "..."}, the X clipboard's text (empty when it holds none);
// PUT takes the same and makes it the clipboard's. UTF-8, at most kMaxClipboardBytes: more would
// need X's INCR transfers, and a clipboard carries text, not files.
inline constexpr std::string_view kClipboardPath = "/agent/v1/clipboard";
inline constexpr size_t kMaxClipboardBytes = 256 * 1024;
// Both sides parse the same way: an object with exactly "text", a string within the limit.
Result<std::string> parse_clipboard(std::string_view body);

// GET kEventsPath?since=N streams what happens in the browser after the agent's event N, one
// JSON object a line: {"seq": N, "type": T, ...fields}, T one of kBrowserEventTypes, each field
// one of kBrowserEventFields holding a string (at most kMaxEventString bytes) or a count. The
// agent keeps its newest kMaxAgentEvents; the stream stays open for the ones to come.
inline constexpr std::string_view kEventsPath = "/agent/v1/events";
inline constexpr size_t kMaxAgentEvents = 1024;
inline constexpr size_t kMaxEventLine = 16 * 1024;
inline constexpr size_t kMaxEventString = 4096;
inline constexpr std::string_view kBrowserEventTypes[] = {
    "page_opened",    "page_closed",         "navigated",         "dialog_opened",
    "file_chooser_opened", "download_started", "download_finished", "download_failed"};
inline constexpr std::string_view kBrowserEventFields[] = {
    "page", "url", "title", "dialog", "message", "default_prompt", "mode", "id",
    "name", "path", "size", "sha256", "state"};
struct BrowserEvent {
  uint64_t seq = 0;
  std::string type;
  nlohmann::json fields = nlohmann::json::object();  // the line without seq and type
};
Result<BrowserEvent> parse_browser_event(std::string_view line);

// kFilesPath serves the sandbox's files below its home and /tmp, never anything a path reaches
// by "..", by a symlink or by a mount out of them:
//   GET ?path=P    the file's bytes (Content-Length)
//   GET ?dir=D     {"entries": [{"name", "type": "file"|"dir"|"other", "size", "mtime"}]}
//   PUT ?path=P    writes the body (Content-Length, at most the request's limit) to P through a
//                  temporary file beside it; answers {"path", "size", "sha256"}
//   DELETE ?path=P removes a file
// P is absolute, at most kMaxFilePath bytes.
inline constexpr std::string_view kFilesPath = "/agent/v1/files";
inline constexpr size_t kMaxFilePath = 1024;
inline constexpr size_t kMaxDirEntries = 10000;
struct FileEntry {
  std::string name;
  std::string type;  // "file", "dir", "other"
  uint64_t size = 0;
  int64_t mtime = 0;  // unix seconds
};
Result<std::vector<FileEntry>> parse_dir_listing(std::string_view body);
// A file's sandbox path as the API takes it: absolute, no "." or ".." parts, no NUL, no empty
// part, at most kMaxFilePath bytes; a trailing "/" is dropped.
Result<std::string> check_file_path(std::string_view path);

// kRecordingsPath: the screen recorded into an MP4 (H.264, fragmented, so it plays while it
// grows) by ffmpeg in the sandbox, fed with the frames the screenshots' capture grabs.
//   POST                 {"id", "fps", "crf", "max_seconds", "max_bytes"} starts one
//   POST /stop?id=ID     stops it, answering once the file is complete
//   GET ?id=ID           its status
// Each answers the recording's status: {"id", "state": "recording"|"stopped"|"failed",
// "reason", "frames", "bytes", "seconds", "path"}.
inline constexpr std::string_view kRecordingsPath = "/agent/v1/recordings";
inline constexpr std::string_view kRecordingsStopPath = "/agent/v1/recordings/stop";
inline constexpr int kMaxRecordingFps = 30;
inline constexpr int64_t kMaxRecordingSeconds = 4 * 3600;
inline constexpr uint64_t kMaxRecordingBytes = uint64_t{4} << 30;
inline constexpr size_t kMaxRecordings = 4;  // at once, per sandbox
struct RecordingRequest {
  std::string id;  // [a-z0-9_]{1,64}
  int fps = 15;
  int crf = 23;  // x264's quality: 15 (best) .. 40
  int64_t max_seconds = 3600;
  uint64_t max_bytes = 512ull << 20;
  bool operator==(const RecordingRequest&) const = default;
};
Result<RecordingRequest> parse_recording_request(std::string_view body);
nlohmann::json to_json(const RecordingRequest& r);
struct RecordingStatus {
  std::string id;
  std::string state;   // "recording", "stopped", "failed"
  std::string reason;  // stopped: "stopped", "max_duration", "max_size", "session_ended"
  uint64_t frames = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::string path;
};
Result<RecordingStatus> parse_recording_status(std::string_view body);
nlohmann::json to_json(const RecordingStatus& s);
bool valid_recording_id(std::string_view id);

// POST kRestoredPath, sent by cabind to the agent of a VM restored from a snapshot, with the
// secret every copy of that snapshot still has: the VM's own secret from now on, the host's
// wall clock, bytes for the kernel's RNG and a machine-id (none: the VM keeps its own, as one
// resumed from hibernation does).
inline constexpr std::string_view kRestoredPath = "/agent/v1/restored";
inline constexpr size_t kRestoreSeedBytes = 64;
struct RestoredRequest {
  std::string secret;      // 32..128 characters of [0-9a-f]
  int64_t unix_ns = 0;     // the host's CLOCK_REALTIME when it sent this
  std::string seed_hex;    // kRestoreSeedBytes bytes, in hex
  std::string machine_id;  // 32 characters of [0-9a-f], or empty
};
Result<RestoredRequest> parse_restored_request(std::string_view body);
nlohmann::json to_json(const RestoredRequest& r);

// What the agent hands the guest's root helper, one line of at most kMaxRestoreLine bytes:
// "<unix_ns> <monotonic_ns> <seed_hex> <machine_id>\n", monotonic_ns being the guest's
// CLOCK_MONOTONIC when the agent read unix_ns (so the helper adds the time spent since), and
// machine_id "-" when it stays as it is.
inline constexpr size_t kMaxRestoreLine = 512;
struct RestoreLine {
  int64_t unix_ns = 0;
  int64_t monotonic_ns = 0;
  std::string seed;  // raw bytes
  std::string machine_id;  // empty: unchanged
};
std::string format_restore_line(const RestoredRequest& r, int64_t monotonic_ns);
Result<RestoreLine> parse_restore_line(std::string_view line);

// Parses the agent's answer; `max_output_bytes` bounds each stream (a guest may lie).
Result<ExecResult> parse_exec_result(std::string_view body, int64_t max_output_bytes);

// The most an honest exec answer for `max_output_bytes` can be: two streams of bytes each
// written as at most 6 JSON characters (\u00XX), plus the other fields.
inline size_t exec_answer_limit(int64_t max_output_bytes) {
  return 2 * 6 * static_cast<size_t>(max_output_bytes) + 64 * 1024;
}
nlohmann::json to_json(const ExecResult& r);

}  // namespace cabin::agent_protocol
