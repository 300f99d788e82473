// Bytes held at once by many holders (the request bodies a session's proxy, or every session's,
// reads whole): a hold that would pass the limit is refused rather than waited for.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

namespace cabin::egress {

class ByteBudget {
 public:
  explicit ByteBudget(uint64_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Gives its bytes back when it ends.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& o) noexcept : budget_(std::exchange(o.budget_, nullptr)), bytes_(o.bytes_) {}
    Hold& operator=(Hold&& o) noexcept {
      if (this != &o) {
        release();
        budget_ = std::exchange(o.budget_, nullptr);
        bytes_ = o.bytes_;
      }
      return *this;
    }
    ~Hold() { release(); }

   private:
    friend class ByteBudget;
    Hold(ByteBudget* b, uint64_t n) : budget_(b), bytes_(n) {}
    void release() {
      if (budget_) budget_->held_.fetch_sub(bytes_);
      budget_ = nullptr;
    }
    ByteBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // `n` more bytes, if they fit.
  std::optional<Hold> take(uint64_t n) {
    uint64_t now = held_.load();
    do {
      if (n > limit_ || now > limit_ - n) return std::nullopt;
    } while (!held_.compare_exchange_weak(now, now + n));
    return Hold(this, n);
  }
  uint64_t held() const { return held_.load(); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> held_{0};
};

}  // namespace cabin::egress
