#include "vnc/rfb_filter.h"

#include <algorithm>
#include <cstring>

namespace cabin::vnc {
namespace {

enum : uint8_t {
  kSetPixelFormat = 0,
  kSetEncodings = 2,
  kFramebufferUpdateRequest = 3,
  kKeyEvent = 4,
  kPointerEvent = 5,
  kClientCutText = 6,
  kSetDesktopSize = 251,
};

uint16_t u16(const std::string& s, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(s[at]) << 8) | static_cast<uint8_t>(s[at + 1]));
}
uint32_t u32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(u16(s, at)) << 16) | u16(s, at + 2);
}

}  // namespace

Result<void> RfbClientFilter::fail(std::string message) {
  state_ = State::kFailed;
  pending_.clear();
  pending_.shrink_to_fit();
  return make_error(Errc::kInvalidArgument, "bad_rfb", std::move(message));
}

Result<size_t> RfbClientFilter::message_length() const {
  const std::string& p = pending_;
  const auto type = static_cast<uint8_t>(p[0]);
  switch (type) {
    case kSetPixelFormat:
      return size_t{20};
    case kSetEncodings: {
      if (p.size() < 4) return size_t{0};
      const size_t n = u16(p, 2);
      if (n > kMaxEncodings) {
        return make_error(Errc::kInvalidArgument, "bad_rfb",
                          "SetEncodings lists " + std::to_string(n) + " encodings (at most " +
                              std::to_string(kMaxEncodings) + ")");
      }
      return 4 + 4 * n;
    }
    case kFramebufferUpdateRequest:
      return size_t{10};
    case kKeyEvent:
      return size_t{8};
    case kPointerEvent:
      return size_t{6};
    case kClientCutText: {
      if (p.size() < 8) return size_t{0};
      const auto len = static_cast<int32_t>(u32(p, 4));
      // A negative length is the extended clipboard's: its magnitude is the payload's size.
      const uint64_t size = len < 0 ? uint64_t{0} - static_cast<int64_t>(len) : uint64_t(len);
      if (size > kMaxClientCutText) {
        return make_error(Errc::kInvalidArgument, "bad_rfb",
                          "ClientCutText of " + std::to_string(size) + " bytes (at most " +
                              std::to_string(kMaxClientCutText) + ")");
      }
      return static_cast<size_t>(8 + size);
    }
    case kSetDesktopSize: {
      if (p.size() < 8) return size_t{0};
      const size_t screens = static_cast<uint8_t>(p[6]);
      if (screens == 0 || screens > kMaxDesktopScreens) {
        return make_error(Errc::kInvalidArgument, "bad_rfb",
                          "SetDesktopSize with " + std::to_string(screens) + " screens");
      }
      return 8 + 16 * screens;
    }
    default:
      return make_error(Errc::kInvalidArgument, "bad_rfb",
                        "unknown RFB client message type " + std::to_string(type));
  }
}

Result<void> RfbClientFilter::feed(std::span<const uint8_t> in, std::string& out) {
  if (state_ == State::kFailed) return make_error(Errc::kInvalidArgument, "bad_rfb", "stream failed");
  size_t at = 0;
  while (at < in.size() || (state_ == State::kMessages && !pending_.empty())) {
    // How many bytes the current unit needs; take at most that many into pending_.
    size_t need = 0;
    switch (state_) {
      case State::kVersion:
        need = 12;
        break;
      case State::kSecurity:
      case State::kClientInit:
        need = 1;
        break;
      case State::kMessages: {
        if (pending_.empty()) {
          pending_.push_back(static_cast<char>(in[at++]));
        }
        auto len = message_length();
        if (!len) return fail(len.error().message);
        // A header whose length field has not arrived yet: read up to the field's end.
        const bool short_header = static_cast<uint8_t>(pending_[0]) == kSetEncodings;
        need = *len != 0 ? *len : short_header ? 4 : 8;
        break;
      }
      case State::kFailed:
        return make_error(Errc::kInvalidArgument, "bad_rfb", "stream failed");
    }
    if (pending_.size() < need) {
      const size_t take = std::min(need - pending_.size(), in.size() - at);
      pending_.append(reinterpret_cast<const char*>(in.data() + at), take);
      at += take;
    }
    if (state_ == State::kMessages) {
      auto len = message_length();
      if (!len) return fail(len.error().message);
      if (*len == 0 || pending_.size() < *len) {
        if (at == in.size()) break;  // wait for more
        continue;
      }
    } else if (pending_.size() < need) {
      break;
    }

    switch (state_) {
      case State::kVersion: {
        static constexpr std::string_view kVersions[] = {"RFB 003.003\n", "RFB 003.007\n",
                                                         "RFB 003.008\n"};
        if (std::find(std::begin(kVersions), std::end(kVersions), pending_) == std::end(kVersions)) {
          return fail("unsupported RFB protocol version");
        }
        // 3.3: the server picks the security type and the client answers nothing.
        state_ = pending_ == kVersions[0] ? State::kClientInit : State::kSecurity;
        out += pending_;
        break;
      }
      case State::kSecurity:
        if (pending_[0] != 1) return fail("only security type None is offered");
        state_ = State::kClientInit;
        out += pending_;
        break;
      case State::kClientInit:
        state_ = State::kMessages;
        out += pending_;
        break;
      case State::kMessages: {
        const auto type = static_cast<uint8_t>(pending_[0]);
        if (type == kSetPixelFormat) {
          const auto bpp = static_cast<uint8_t>(pending_[4]);
          const auto true_colour = static_cast<uint8_t>(pending_[7]);
          if ((bpp != 8 && bpp != 16 && bpp != 32) || true_colour > 1) {
            return fail("SetPixelFormat with an invalid pixel format");
          }
        }
        ++messages_;
        const bool input = type == kKeyEvent || type == kPointerEvent || type == kClientCutText;
        const bool pass = type != kSetDesktopSize && (!input || access_ == RfbAccess::kControl);
        if (pass) {
          out += pending_;
        } else {
          ++dropped_;
        }
        break;
      }
      case State::kFailed:
        break;
    }
    pending_.clear();
    if (pending_.capacity() > 64 * 1024) pending_.shrink_to_fit();  // after a large cut text
  }
  return {};
}

}  // namespace cabin::vnc
