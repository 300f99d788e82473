// SimDriver ("sim", cabind --sim-driver): sessions without a sandbox, for measuring the server
// itself at scales no host's memory holds in browsers (bench/scale_out.mjs). Nothing runs: the
// agent is a coroutine in cabind that answers health as ready, echoes exec's argv and accepts
// navigations; the browser's CDP endpoint answers every command with an empty result.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <memory>
#include <set>
#include <string>

#include "server/drivers/sandbox_driver.h"

namespace cabin::drivers {

class SimDriver final : public SandboxDriver {
 public:
  explicit SimDriver(net::any_io_executor ex) : ex_(std::move(ex)) {}
  DriverInfo info() const override;
  net::awaitable<Result<SandboxPtr>> create(const SandboxSpec& spec) override;
  // Nothing outlives cabind: a restart finds no sim sandbox to adopt.
  net::awaitable<Result<SandboxPtr>> adopt(const std::string& session_id,
                                           const nlohmann::json& handoff) override;
  void reap_leftovers(const std::set<std::string>& keep) override { (void)keep; }

 private:
  net::any_io_executor ex_;
};

}  // namespace cabin::drivers
