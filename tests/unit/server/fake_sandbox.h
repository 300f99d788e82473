// FakeSandbox: a sandbox without isolation, browser or agent process, for unit tests of the code
// around sandboxes. Each dial_agent() is one end of a socketpair; a small agent in the test
// serves the other end with Beast, answering the agent protocol as the test's handler says.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/notifier.h"
#include "server/drivers/sandbox_driver.h"

namespace cabin::testing {

namespace net = boost::asio;
namespace http = boost::beast::http;

using AgentRequest = http::request<http::string_body>;
using AgentResponse = http::response<http::string_body>;

// What a fake agent answers; the default answers health as ready and exec by echoing argv.
using AgentHandler = std::function<AgentResponse(const AgentRequest&)>;
AgentResponse default_agent_answer(const AgentRequest& req);
AgentResponse json_answer(http::status status, const std::string& body);
// A frame stream's answer: its header and `frames` JPEG-typed records, held open after them.
AgentResponse frames_answer(const std::vector<std::string>& frames);

// Shared by the sandbox and the test, so the test sees what happened after the session let go.
struct FakeSandboxState {
  explicit FakeSandboxState(net::any_io_executor ex) : changed(ex) {}
  std::string id;
  std::string secret;
  AgentHandler handler = default_agent_answer;
  // Serves dial_loopback(port): the test's end of each stream; empty: no direct path.
  std::function<void(net::generic::stream_protocol::socket)> loopback;
  std::vector<std::string> targets;  // every agent request's target, in order
  std::vector<std::string> secrets;  // the secret header each carried
  // Answers carrying the header X-Fake-Hold stay open after their body, like a frame stream;
  // they are kept here until the sandbox ends.
  std::vector<net::generic::stream_protocol::socket> held;
  bool exited = false;
  std::string exit_reason;
  int destroys = 0;
  bool destroyed = false;
  bool paused = false;  // pause() and resume() flip it; refused once the sandbox has ended
  bool released = false;  // left running for a later manager to adopt
  std::chrono::milliseconds destroy_takes{0};
  std::chrono::steady_clock::time_point destroy_began, destroy_ended;
  Notifier changed;

  // The sandbox ends by itself (its agent died).
  void exit(std::string why);
};

class FakeSandbox final : public drivers::Sandbox {
 public:
  explicit FakeSandbox(std::shared_ptr<FakeSandboxState> s) : s_(std::move(s)) {}
  net::awaitable<Result<drivers::AgentStream>> dial_agent() override;
  net::awaitable<Result<drivers::AgentStream>> dial_loopback(int port) override;
  net::awaitable<Result<void>> pause() override;
  net::awaitable<Result<void>> resume() override;
  net::awaitable<void> destroy() override;
  net::awaitable<std::string> wait_exit() override;
  std::vector<std::string> recent_output() const override { return {"fake output"}; }
  std::string describe() const override { return "fake sandbox " + s_->id; }
  nlohmann::json handoff() const override { return {{"fake", s_->id}}; }
  void release() override { s_->released = true; }

 private:
  std::shared_ptr<FakeSandboxState> s_;
};

class FakeDriver final : public drivers::SandboxDriver {
 public:
  explicit FakeDriver(net::any_io_executor ex, std::string name = "namespace")
      : ex_(std::move(ex)), name_(std::move(name)) {}
  drivers::DriverInfo info() const override;
  net::awaitable<Result<drivers::SandboxPtr>> create(const drivers::SandboxSpec& spec) override;
  // Adopts a released, still running sandbox of this driver whose handoff names it.
  net::awaitable<Result<drivers::SandboxPtr>> adopt(const std::string& session_id,
                                                    const nlohmann::json& handoff) override;
  // Destroys the released sandboxes not kept.
  void reap_leftovers(const std::set<std::string>& keep) override;

  // Each sandbox made, oldest first.
  std::vector<std::shared_ptr<FakeSandboxState>> sandboxes;
  std::vector<drivers::SandboxSpec> specs;
  // Given to each new sandbox.
  AgentHandler handler = default_agent_answer;
  std::function<void(net::generic::stream_protocol::socket)> loopback;
  std::chrono::milliseconds destroy_takes{0};
  bool fail_create = false;

 private:
  net::any_io_executor ex_;
  std::string name_;
};

}  // namespace cabin::testing
