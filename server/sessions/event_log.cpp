#include "server/sessions/event_log.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"

namespace cabin::sessions {

uint64_t EventLog::emit(std::string_view type, nlohmann::json fields) {
  if (closed_) return 0;
  if (!fields.is_object()) fields = nlohmann::json::object();
  const uint64_t seq = next_seq_++;
  fields["seq"] = seq;
  fields["type"] = type;
  fields["time"] = format_rfc3339_ms(std::chrono::system_clock::now());
  auto json = std::make_shared<const std::string>(
      fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  bytes_ += json->size();
  kept_.push_back({seq, std::move(json)});
  while (kept_.size() > kEventsKept || (bytes_ > kEventBytesKept && kept_.size() > 1)) {
    bytes_ -= kept_.front().json->size();
    kept_.pop_front();
  }
  changed_.notify_all();
  return seq;
}

void EventLog::close() {
  closed_ = true;
  changed_.notify_all();
}

EventLog::Slice EventLog::after(uint64_t since) const {
  Slice out;
  auto first = std::upper_bound(kept_.begin(), kept_.end(), since,
                                [](uint64_t s, const Item& k) { return s < k.seq; });
  const uint64_t oldest_wanted = since + 1;
  const uint64_t oldest_kept = kept_.empty() ? next_seq_ : kept_.front().seq;
  out.gap = oldest_wanted < oldest_kept && oldest_wanted < next_seq_;
  for (auto it = first; it != kept_.end(); ++it) out.events.push_back(*it);
  return out;
}

}  // namespace cabin::sessions
