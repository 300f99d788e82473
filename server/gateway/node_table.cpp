#include "server/gateway/node_table.h"

#include <algorithm>

#include "common/crypto.h"

namespace cabin::gateway {

void NodeTable::set_addresses(const std::vector<std::string>& addresses, Clock::time_point now) {
  const std::set<std::string> fresh(addresses.begin(), addresses.end());
  std::erase_if(nodes_, [&](const auto& kv) { return !fresh.contains(kv.first); });
  for (const auto& a : fresh) {
    if (nodes_.contains(a)) continue;
    Node n;
    n.address = a;
    n.down_since = now;  // down until it first answers
    nodes_.emplace(a, std::move(n));
  }
}

void NodeTable::report(const std::string& address, const NodeReport& r) {
  auto it = nodes_.find(address);
  if (it == nodes_.end()) return;
  it->second.last = r;
  it->second.up = true;
  it->second.missed = 0;
  if (!r.id.empty()) seen_ids_.insert(r.id);
  it->second.placed = 0;
}

void NodeTable::report_failure(const std::string& address, Clock::time_point now, bool refused) {
  auto it = nodes_.find(address);
  if (it == nodes_.end()) return;
  Node& n = it->second;
  ++n.missed;
  if (n.up && !refused && n.missed < kMissedPollsDown) return;
  if (n.up) n.down_since = now;
  n.up = false;
}

Lookup NodeTable::find(std::string_view node_id) const {
  bool silent = false;
  for (const auto& [address, n] : nodes_) {
    // A replaced pod may leave its old address behind for a moment: the one that answers wins.
    if (!node_id.empty() && n.last.id == node_id && n.up) return {Lookup::State::kUp, address};
    if (n.last.id.empty()) silent = true;
  }
  const bool seen = seen_ids_.contains(std::string(node_id));
  return {silent || seen ? Lookup::State::kDown : Lookup::State::kUnknown, {}};
}

std::optional<std::string> NodeTable::place(std::string_view idempotency_key) {
  Node* best = nullptr;
  int64_t best_score = 0;
  std::string best_hash;
  for (auto& [address, n] : nodes_) {
    if (!n.up || !n.last.ready) continue;
    if (!idempotency_key.empty()) {
      // Rendezvous: the highest hash of (key, node) wins whatever the load, so that a retry
      // finds the node that saw the first try (a full one queues or refuses it itself).
      std::string h = sha256_hex(std::string(idempotency_key) + "\n" + n.last.id);
      if (!best || h > best_hash) {
        best = &n;
        best_hash = std::move(h);
      }
      continue;
    }
    // A full node still gets a create when all are full: it queues it (--create-queue).
    const int room = n.last.max - n.last.live - n.placed;
    const int64_t score =
        int64_t{room} + std::clamp(n.last.pool_ready - n.placed, 0, std::max(room, 0));
    if (!best || score > best_score) {
      best = &n;
      best_score = score;
    }
  }
  if (!best) return std::nullopt;
  ++best->placed;
  return best->address;
}

std::vector<std::string> NodeTable::up_addresses() const {
  std::vector<std::string> out;
  for (const auto& [address, n] : nodes_)
    if (n.up) out.push_back(address);
  return out;
}

std::vector<std::string> NodeTable::down_ids() const {
  std::vector<std::string> out;
  for (const auto& [address, n] : nodes_)
    if (!n.up) out.push_back(n.last.id.empty() ? address : n.last.id);
  return out;
}

bool NodeTable::any_up() const {
  return std::any_of(nodes_.begin(), nodes_.end(), [](const auto& kv) { return kv.second.up; });
}

}  // namespace cabin::gateway
