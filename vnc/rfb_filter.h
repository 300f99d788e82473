// RfbClientFilter: reads the client-to-server half of an RFB connection message by message, with
// strict lengths, and decides which bytes reach the sandbox (view-only enforced on the host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/result.h"

namespace cabin::vnc {

enum class RfbAccess : uint8_t {
  kView,     // watch: key, pointer and cut-text messages are dropped
  kControl,  // watch, type, point and paste
};

// Limits on what one client message may carry. Longer is a protocol error: the connection closes.
inline constexpr size_t kMaxClientCutText = 1024 * 1024;
inline constexpr size_t kMaxEncodings = 256;  // noVNC sends about 25
inline constexpr size_t kMaxDesktopScreens = 16;
// The largest whole message: a ClientCutText at the limit. Bounds the filter's buffer.
inline constexpr size_t kMaxClientMessage = 8 + kMaxClientCutText;

// Knows only the client side: protocol version 3.3, 3.7 or 3.8, security type None (the guest's
// server has no password; cabind authenticates), ClientInit, then SetPixelFormat, SetEncodings,
// FramebufferUpdateRequest, KeyEvent, PointerEvent, ClientCutText (Latin-1 or, with a negative
// length, the extended clipboard) and SetDesktopSize. Anything else is an error.
//
// SetDesktopSize is always dropped: the session's resolution belongs to the API, not a viewer.
class RfbClientFilter {
 public:
  explicit RfbClientFilter(RfbAccess access) : access_(access) {}

  // Consumes `in` (split anywhere) and appends the bytes to forward to `out`; whole messages
  // only. After an error (code "bad_rfb"), every call fails: close the connection.
  Result<void> feed(std::span<const uint8_t> in, std::string& out);

  RfbAccess access() const { return access_; }
  uint64_t messages() const { return messages_; }  // complete messages seen after ClientInit
  uint64_t dropped() const { return dropped_; }    // of those, not forwarded

 private:
  enum class State : uint8_t { kVersion, kSecurity, kClientInit, kMessages, kFailed };

  // Length of the message at the front of pending_ (0: not known yet), or an error.
  Result<size_t> message_length() const;
  Result<void> fail(std::string message);

  RfbAccess access_;
  State state_ = State::kVersion;
  std::string pending_;  // an incomplete message, at most kMaxClientMessage bytes
  uint64_t messages_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace cabin::vnc
