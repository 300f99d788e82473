// RfbServer: an RFB (VNC) server on libvncserver that serves one X display from its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"

namespace cabin::vnc {

struct RfbServerOptions {
  std::string display;                  // ":N"
  std::string listen_host = "127.0.0.1";  // an IP address; the sandbox's loopback by default
  uint16_t port = 5900;                 // 0: any free port (tests), see RfbServer::port()
  int max_fps = 60;                     // screen captures per second at most, 1..240
  int max_clients = 16;                 // further connections are closed at once
  bool use_shm = true;
};

struct RfbStats {
  uint64_t frames = 0;           // captures that found a change
  uint64_t captures = 0;         // all captures (a damage event that changed nothing counts)
  uint64_t scroll_copies = 0;    // vertical shifts sent as CopyRect
  uint64_t connections = 0;      // accepted since start
  int clients = 0;               // connected now
  uint64_t input_events = 0;     // key and pointer events applied
  uint64_t cut_texts_in = 0;     // client cut texts put on the X clipboard
  uint64_t cut_texts_out = 0;    // X clipboard changes sent to clients
};

// Serves the display with libvncserver's encodings (Tight, ZRLE, Hextile, Zlib, Raw...), the
// pointer's shape (rich cursor, or drawn into the picture for clients without cursor support),
// keyboard and pointer input through XTest, the clipboard both ways (CLIPBOARD <-> cut text,
// UTF-8 with the extended clipboard), and a desktop resize when the X screen changes size.
// No authentication of its own (the host authenticates; the port is on the sandbox's loopback),
// no file transfer, chat or other extension.
//
// Threading: everything runs on one thread the server owns, with its own X connections.
// libvncserver writes to clients with blocking sends (up to its client timeout) and waits on
// each new connection to tell a WebSocket from RFB; run on an event loop shared with other work
// (cabin-agent's single io_context), one slow viewer would stall it all. The thread sleeps in
// poll() on the X connections and the sockets, so an idle screen costs no CPU.
class RfbServer {
 public:
  // Opens the display, binds the port and starts the thread; errors (display unreachable, port
  // taken) are returned here. Call vnc::init_threads() first when other threads use Xlib too.
  static Result<std::unique_ptr<RfbServer>> start(RfbServerOptions options);

  RfbServer(const RfbServer&) = delete;
  RfbServer& operator=(const RfbServer&) = delete;
  // Disconnects every client and joins the thread.
  ~RfbServer();

  uint16_t port() const;
  RfbStats stats() const;

  // The X clipboard's text as the server last saw it (set by a viewer, by set_clipboard_text or
  // by an X client such as Chromium), and making it the clipboard's: the server's thread owns
  // the selection, answers paste requests and tells the viewers. Safe from any thread.
  std::string clipboard_text() const;
  void set_clipboard_text(std::string utf8);

  struct Impl;

 private:
  explicit RfbServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cabin::vnc
