// Clipboard: the X CLIPBOARD selection as text, both ways — owns it for text given to it, and
// reports text other X clients put there.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "vnc/display.h"

namespace cabin::vnc {

// Text larger than this is neither read from the selection nor accepted by set_text(): the
// selection would need the INCR protocol, and a viewer's clipboard has no use for megabytes.
inline constexpr size_t kMaxClipboardBytes = 256 * 1024;

// Give it a Display of its own: it reads every event queued on that connection, as
// DamageTracker does on its own. Wait until fd() is readable, then call process(); call process()
// before every wait too (Xlib may already hold events).
class Clipboard {
 public:
  static Result<Clipboard> create(Display& display);

  Clipboard(Clipboard&&) noexcept;
  Clipboard& operator=(Clipboard&&) noexcept;
  ~Clipboard();

  int fd() const;

  // Takes CLIPBOARD and PRIMARY with `utf8` (truncated at kMaxClipboardBytes on a character
  // boundary); other clients pasting get it as UTF8_STRING, STRING (Latin-1) or TEXT.
  Result<void> set_text(std::string utf8);

  // Answers paste requests from other clients and follows selection changes. Returns the new
  // text when another client has put text on CLIPBOARD since the last call. Does not block.
  std::optional<std::string> process();

 private:
  struct Impl;
  explicit Clipboard(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Latin-1 (what classic RFB cut text carries) to UTF-8, and back with '?' for characters
// Latin-1 lacks. Invalid UTF-8 bytes become '?' too.
std::string latin1_to_utf8(std::string_view latin1);
std::string utf8_to_latin1(std::string_view utf8);

}  // namespace cabin::vnc
