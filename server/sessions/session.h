// Session: the composition root of one live session: its sandbox, agent client and timers.
#pragma once

#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "server/api/session_spec.h"
#include "server/drivers/sandbox_driver.h"
#include "server/sessions/agent_client.h"
#include "server/store/session_store.h"

namespace cabin::sessions {

class Session final {
 public:
  Session(store::SessionRecord record, api::SessionSpec spec, drivers::SandboxPtr sandbox,
          std::string agent_secret, const net::any_io_executor& ex)
      : record_(std::move(record)),
        spec_(std::move(spec)),
        sandbox_(std::move(sandbox)),
        agent_(*sandbox_, std::move(agent_secret)),
        expiry_(ex) {}
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return record_.id; }
  const store::SessionRecord& record() const { return record_; }
  store::SessionRecord& mutable_record() { return record_; }
  const api::SessionSpec& spec() const { return spec_; }
  drivers::Sandbox& sandbox() { return *sandbox_; }
  AgentClient& agent() { return agent_; }
  net::steady_timer& expiry_timer() { return expiry_; }

  // Filled in when the agent reports ready.
  int devtools_port = 0;
  std::string browser_path;
  // Bumped to revoke every token of the session at once.
  uint32_t token_generation = 0;
  bool ending = false;

 private:
  store::SessionRecord record_;
  const api::SessionSpec spec_;
  drivers::SandboxPtr sandbox_;
  AgentClient agent_;
  net::steady_timer expiry_;
};

using SessionPtr = std::shared_ptr<Session>;

}  // namespace cabin::sessions
