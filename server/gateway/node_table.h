// NodeTable: what cabin-gateway knows of the nodes: their addresses (from DNS), the id and load
// each reported when last asked, and whether it answers. Placement and routing read it; the
// poller writes it. No I/O here.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace cabin::gateway {

using Clock = std::chrono::steady_clock;

inline constexpr int kMissedPollsDown = 2;

struct NodeReport {
  std::string id;  // the node's --node-id
  bool ready = false;  // /readyz answered 200: it takes creates
  int live = 0;        // its live sessions
  int max = 0;         // its --max-sessions
  int pool_ready = 0;  // warm sandboxes waiting in its pools
};

struct Node {
  std::string address;  // "host:port", as dialled
  NodeReport last;      // the last report; last.id empty until the first
  bool up = false;      // answering: see report_failure
  int missed = 0;       // polls in a row that got no answer
  int placed = 0;       // creates sent since the last report, not yet in `live`
  Clock::time_point down_since{};
};

// What routing to a node id finds.
struct Lookup {
  enum class State { kUp, kDown, kUnknown } state = State::kUnknown;
  std::string address;
};

class NodeTable {
 public:
  // The addresses discovery found now; nodes at other addresses are forgotten.
  void set_addresses(const std::vector<std::string>& addresses, Clock::time_point now);
  void report(const std::string& address, const NodeReport& r);
  // A poll got no answer. `refused`: nothing listens at the address (the node is gone), and it is
  // down at once; otherwise (no answer in time: a node that is busy, or hung) after
  // kMissedPollsDown polls in a row, so that one slow answer from a busy node does not make its
  // sessions unavailable and drop them from lists.
  void report_failure(const std::string& address, Clock::time_point now, bool refused);

  // The node that holds sessions of `node_id`. kDown: it stopped answering, or left discovery
  // (a pod being replaced) after reporting that id. kUnknown: no node ever reported that id and
  // none is silent that might hold it.
  Lookup find(std::string_view node_id) const;
  // The node for a create: one that is up and ready, the most room first (a warm pool sandbox
  // counts as room twice; when all are full, the least full, which queues it). With an Idempotency-Key, the choice depends on the key
  // alone among the nodes up (rendezvous hashing), so a retry reaches the node that saw the
  // first try. Counts the create against the node until its next report.
  std::optional<std::string> place(std::string_view idempotency_key);
  // Every node that is up, and the ids of those that are not.
  std::vector<std::string> up_addresses() const;
  std::vector<std::string> down_ids() const;
  bool any_up() const;
  const std::map<std::string, Node>& nodes() const { return nodes_; }

 private:
  std::map<std::string, Node> nodes_;  // by address
  std::set<std::string> seen_ids_;     // every node id ever reported: few, and ids are reused
};

}  // namespace cabin::gateway
