// EventLog: what happened in one session, as numbered JSON events that stream to clients
// (GET /v1/sessions/{id}/events) and replay after a reconnect (?since=).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/notifier.h"

namespace cabin::sessions {

// The newest events are kept, the oldest dropped first: a count and a byte bound, so a burst of
// events (a page opening hundreds of frames) costs bounded memory whatever readers do.
inline constexpr size_t kEventsKept = 1024;
inline constexpr size_t kEventBytesKept = 1 << 20;

class EventLog {
 public:
  using Event = std::shared_ptr<const std::string>;  // one serialized JSON object

  explicit EventLog(net::any_io_executor ex) : changed_(std::move(ex)) {}
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Adds {"seq", "type", "time"} to `fields` (an object), keeps it and wakes the readers.
  // Ignored once closed. Returns the event's seq (0 when ignored).
  uint64_t emit(std::string_view type, nlohmann::json fields = nlohmann::json::object());
  // The session has ended: readers finish after its last event.
  void close();
  bool closed() const { return closed_; }

  struct Item {
    uint64_t seq;
    Event json;
  };
  struct Slice {
    std::vector<Item> events;  // seq > since, oldest first
    // Events after `since` that are no longer kept (the reader fell behind, or asked for a
    // replay older than what is kept): the first of `events` is not since + 1.
    bool gap = false;
  };
  Slice after(uint64_t since) const;
  uint64_t last_seq() const { return next_seq_ - 1; }
  Notifier& changed() { return changed_; }

 private:
  std::deque<Item> kept_;
  size_t bytes_ = 0;
  uint64_t next_seq_ = 1;
  bool closed_ = false;
  Notifier changed_;
};

using EventLogPtr = std::shared_ptr<EventLog>;

}  // namespace cabin::sessions
