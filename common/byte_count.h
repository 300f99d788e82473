// Byte counts that relays on any thread add to on every read and a scrape reads: each thread adds
// into a slot of its own, so the hot path takes no lock and shares no cache line.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cabin {

class ShardedCount {
 public:
  void add(uint64_t n) {
    // A relaxed add to a line only this thread writes (unless more threads than slots).
    slots_[slot_index()].v.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t total() const {
    uint64_t sum = 0;
    for (const auto& s : slots_) sum += s.v.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  static constexpr size_t kSlots = 64;
  struct alignas(64) Slot {
    std::atomic<uint64_t> v{0};
  };
  static size_t slot_index() {
    static std::atomic<size_t> next{0};
    thread_local const size_t mine = next.fetch_add(1, std::memory_order_relaxed) % kSlots;
    return mine;
  }
  std::array<Slot, kSlots> slots_;
};

// Where one relay counts: `up` the bytes from the client towards the sandbox, `down` those back.
// Null: not counted.
struct RelayCounts {
  ShardedCount* up = nullptr;
  ShardedCount* down = nullptr;
};

inline void count_bytes(ShardedCount* c, size_t n) {
  if (c) c->add(n);
}

}  // namespace cabin
