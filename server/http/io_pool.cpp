#include "server/http/io_pool.h"

#include "common/log.h"

namespace cabin::http_api {

IoPool::IoPool(size_t threads) {
  for (size_t i = 0; i < threads; ++i) {
    contexts_.push_back(std::make_unique<net::io_context>(1));
    guards_.emplace_back(contexts_.back()->get_executor());
  }
  for (auto& c : contexts_) {
    threads_.emplace_back([ctx = c.get()] {
      // spawn() catches what escapes a coroutine; this is for anything else a handler throws.
      for (;;) {
        try {
          ctx->run();
          return;
        } catch (const std::exception& e) {
          logger("http")->error("pump thread: {}", e.what());
        }
      }
    });
  }
}

net::any_io_executor IoPool::next() {
  size_t i = next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size();
  return contexts_[i]->get_executor();
}

void IoPool::stop() {
  guards_.clear();
  for (auto& c : contexts_) c->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  contexts_.clear();
}

}  // namespace cabin::http_api
