// An in-memory raft::Storage for the simulator that separates what is durable from what is
// merely written, so a simulated crash can lose exactly what a real one could.
//
// State: the hard state and the snapshot (durable on every write, as the header says), the
// visible log the Node works with, the durable log (as of the last Sync), and the operations
// (Append, TruncateFrom) since that Sync. Crash() rebuilds the visible log from the durable
// one plus all, none or a random prefix of those operations, then applies the recovery rule
// a real store needs after a snapshot: if the log does not hold the snapshot's last entry
// with the snapshot's epoch, it continues empty at the snapshot's end.
//
// It also checks the core's use of the contract where it can (offsets in range, truncation
// above the commit offset, snapshots of committed state) and feeds the checker every appended
// entry (log matching), hard state (terms and votes) and snapshot (replay equality).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "controllerd/raft/raft.h"

namespace runnel::controllerd::raft::sim {

class Checker;

enum class CrashMode {
  kKeepUnsynced,  // the OS flushed everything before the crash
  kLoseUnsynced,  // only what Sync() made durable survives
  kTorn,          // a random prefix of the unsynced operations survives
};
std::string_view CrashModeName(CrashMode mode);

// Deliberate storage bugs, so tests can show that the checker notices them.
struct StorageBugs {
  bool forget_synced_entry = false;  // a crash also loses the last synced entry
  bool forget_vote = false;          // a crash loses the vote (keeps the term)
  bool sync_does_nothing = false;    // Sync() returns OK but makes nothing durable
};

class MemStorage final : public Storage {
 public:
  // `checker` may be null (no checks). `retain_before_snapshot`: how many entries before a
  // snapshot's end the log keeps (a real store keeps some; the core must cope either way).
  MemStorage(NodeId node, Checker* checker, StorageBugs bugs = {},
             int64_t retain_before_snapshot = 0);

  HardState hard_state() const override { return hard_; }
  Status SetHardState(const HardState& state) override;
  SnapshotId snapshot_id() const override { return snapshot_id_; }
  int64_t start_offset() const override { return log_.start; }
  int64_t end_offset() const override { return log_.end(); }
  StatusOr<int64_t> TermAt(int64_t offset) const override;
  StatusOr<std::vector<Entry>> Read(int64_t from, int64_t to, size_t max_bytes) const override;
  Status Append(std::span<const Entry> entries) override;
  Status TruncateFrom(int64_t offset) override;
  Status Sync() override;
  Status SaveSnapshot(SnapshotId id, std::string data) override;
  Status InstallSnapshot(SnapshotId id, std::string data) override;
  StatusOr<std::string> ReadSnapshot() const override;

  // The commit offset of the Node using this storage, when there is one (for the checks that
  // truncation and snapshots stay above / below it).
  void set_commit_probe(std::function<std::optional<int64_t>()> probe) {
    commit_probe_ = std::move(probe);
  }
  // The next write (SetHardState, Append, TruncateFrom, Sync, SaveSnapshot, InstallSnapshot)
  // fails with an I/O error and changes nothing.
  void FailNextWrite() { fail_next_write_ = true; }
  // The next Sync() fails: the process dies with its unsynced writes in flight (what then
  // survives is the crash mode's choice).
  void FailNextSync() { fail_next_sync_ = true; }
  void ClearFaults() {
    fail_next_write_ = false;
    fail_next_sync_ = false;
  }

  // The process died: the visible log becomes what survived on disk (see the file comment).
  void Crash(CrashMode mode, std::mt19937_64& rng);

  // --- For the checker ---
  // The visible log's entry at `offset`, or null.
  const Entry* EntryAt(int64_t offset) const { return log_.At(offset); }
  // Whether `entry` would survive a crash right now that loses everything unsynced: under the
  // snapshot, or in the durable log.
  bool DurablyHolds(const Entry& entry) const;
  // The lowest offset where the durable state may have lost entries since the last call
  // (INT64_MAX when none), for incremental checking.
  int64_t TakeDurableLowWater();
  size_t unsynced_ops() const { return pending_.size(); }

 private:
  struct Log {
    int64_t start = 0;
    std::vector<Entry> entries;
    int64_t end() const { return start + static_cast<int64_t>(entries.size()); }
    const Entry* At(int64_t offset) const {
      if (offset < start || offset >= end()) return nullptr;
      return &entries[offset - start];
    }
    void TruncateFrom(int64_t offset);
    void DropBefore(int64_t offset);
    void Reset(int64_t at) {
      start = at;
      entries.clear();
    }
  };
  // One unsynced write: TruncateFrom(offset) when `entries` is empty, else Append(entries).
  struct Op {
    bool truncate = false;
    int64_t offset = 0;
    std::vector<Entry> entries;
  };

  Status InjectedFailure(std::string_view call);
  void Violation(std::string why) const;
  std::optional<int64_t> TermOf(const Log& log, int64_t offset) const;
  void ApplyToDurable(const Op& op);
  // Whether the durable log lines up with the snapshot (else a recovery would discard it).
  bool DurableLogFollowsSnapshot() const;

  NodeId node_;
  Checker* checker_;
  StorageBugs bugs_;
  int64_t retain_before_snapshot_;
  std::function<std::optional<int64_t>()> commit_probe_;
  bool fail_next_write_ = false;
  bool fail_next_sync_ = false;

  HardState hard_;
  SnapshotId snapshot_id_;
  std::optional<std::string> snapshot_data_;
  Log log_;      // what the Node sees
  Log durable_;  // what survives a crash (before the snapshot recovery rule)
  std::vector<Op> pending_;
  int64_t low_water_ = 0;
};

}  // namespace runnel::controllerd::raft::sim
