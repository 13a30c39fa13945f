// The safety invariants of the Raft simulator, kept apart from the simulation so tests can
// feed them planted violations directly.
//
// The checker keeps the global committed sequence G: every entry any node has applied or
// holds within its commit offset, in offset order. Every later sighting of a committed offset
// must equal G there, so a committed entry that is lost or changed anywhere is caught. The
// state-machine hash after every prefix of G is kept too, so a snapshot can be compared with
// the replay of the log it claims to cover.
//
// The first violation is kept (later ones are usually consequences of it); the simulation
// stops at the end of the step that found it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/util/status.h"
#include "controllerd/raft/raft.h"

namespace runnel::controllerd::raft::sim {

// The simulator's state machine: applied entries fold into a hash; the last few payloads are
// kept so a snapshot has some bytes to send in chunks.
struct SmState {
  static constexpr uint64_t kInitialHash = 0xcbf29ce484222325ull;
  static constexpr size_t kRecent = 8;

  int64_t next = 0;  // the next offset to apply
  uint64_t hash = kInitialHash;
  int64_t payloads = 0;  // non-empty entries applied (no-ops excluded)
  std::deque<std::string> recent;

  void Apply(const Entry& entry);
  bool operator==(const SmState&) const = default;
};

// Folds one entry into a state hash (FNV-1a over offset, term, size and data).
uint64_t ApplyHash(uint64_t hash, const Entry& entry);
std::string EncodeSnapshot(const SmState& state);
StatusOr<SmState> DecodeSnapshot(std::string_view data);

class Checker {
 public:
  explicit Checker(std::vector<NodeId> voters);

  // Records a violation; only the first is kept.
  void Fail(std::string why);
  bool failed() const { return failure_.has_value(); }
  const std::string& failure() const { return *failure_; }

  bool IsVoter(NodeId node) const;
  int majority() const { return static_cast<int>(voters_.size()) / 2 + 1; }

  // --- The committed sequence (invariants 2, 3, 4) ---
  int64_t committed_end() const { return static_cast<int64_t>(committed_.size()); }
  const Entry& committed(int64_t offset) const { return committed_[offset]; }
  // The state hash after applying every committed entry < end (end <= committed_end()).
  uint64_t HashAt(int64_t end) const { return hashes_[end]; }
  // `node` holds `entry` as committed (it applied it, or it lies within its commit offset):
  // it must equal G at that offset, or extend G by exactly one. `how` names the sighting.
  void Committed(NodeId node, const Entry& entry, std::string_view how);
  // A client proposed `payload`; committed non-empty data must be a proposed payload, once.
  void Proposed(const std::string& payload);
  std::optional<int64_t> OffsetOfPayload(const std::string& payload) const;

  // --- Log matching (invariant 3) ---
  // `node` appended `entry` after an entry of term `prev_term`. Every (offset, term) names one
  // entry: the same data and the same preceding term everywhere, so by induction two logs
  // sharing an (offset, term) agree up to it.
  void Appended(NodeId node, const Entry& entry, int64_t prev_term);

  // --- Leaders (invariants 1, 8) ---
  // `node` acts as the leader of `term` (its role says so, or it sent a leader-only message).
  void Leader(NodeId node, int64_t term);
  std::optional<NodeId> LeaderOf(int64_t term) const;
  int64_t leaders_seen() const { return static_cast<int64_t>(leaders_.size()); }

  // --- Hard state (invariant 6) ---
  // `node` stored `after` over `before`. Terms never go back (also across crashes, which a
  // buggy storage could hide: the checker keeps its own record), one vote per term.
  void HardStateStored(NodeId node, const HardState& before, const HardState& after);

  // --- Snapshots (invariant 5) ---
  // A snapshot must be the state after replaying G up to its end_offset, with the epoch of
  // G's entry end_offset - 1.
  void CheckSnapshot(NodeId node, SnapshotId id, std::string_view data, std::string_view where);

  // --- Durability ---
  // `durable_prefixes` holds, per voter, how many leading entries of G survive a crash of it
  // (in its synced log or under its snapshot). Every committed entry was synced on a majority
  // of voters when it committed and those voters never drop it, so the majority-th largest
  // prefix must cover all of G.
  void CheckDurableQuorum(std::vector<int64_t> durable_prefixes);

 private:
  std::optional<std::string> failure_;
  std::vector<NodeId> voters_;

  std::vector<Entry> committed_;
  std::vector<uint64_t> hashes_;                    // hashes_[i] = state after committed_[0, i)
  std::map<std::string, int64_t> payload_offsets_;  // committed payload -> offset
  std::set<std::string> proposed_;

  struct LogKey {
    uint64_t data_hash;
    int64_t prev_term;
  };
  std::map<std::pair<int64_t, int64_t>, LogKey> log_entries_;  // (offset, term) -> entry

  std::map<int64_t, NodeId> leaders_;                   // term -> leader
  std::map<std::pair<NodeId, int64_t>, NodeId> votes_;  // (voter, term) -> candidate
  std::map<NodeId, int64_t> max_terms_;                 // node -> highest term stored
};

}  // namespace runnel::controllerd::raft::sim
