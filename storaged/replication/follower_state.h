// The follower side of one partition's replication, pure: what to fetch next, where to
// truncate when the leader answers with a diverging epoch (KIP-279, Kafka's
// AbstractFetcherThread rules), and the follower's high watermark. Like LeaderState: no
// I/O, no threads, no clock; the caller appends and truncates its log itself.
#pragma once

#include <cstdint>

#include "storaged/replication/epoch_history.h"
#include "storaged/replication/leader_state.h"

namespace runnel::storaged::replication {

class FollowerState {
 public:
  // Following `leader` in `leader_epoch`. `high_watermark` is the one known so far (a
  // former leader's, or the checkpoint's after a restart), kept at most the log end.
  FollowerState(int32_t self, int32_t leader, int32_t leader_epoch, int64_t high_watermark,
                int64_t log_end_offset);

  int32_t self() const { return self_; }
  int32_t leader() const { return leader_; }
  int32_t leader_epoch() const { return leader_epoch_; }
  int64_t high_watermark() const { return high_watermark_; }

  // The next fetch: from the log end, with the latest epoch of the log (-1 when it has
  // none) and our current leader epoch.
  FollowerFetch NextFetch(const EpochHistory& epochs, int64_t log_end_offset) const;

  // Whether the answer to `answered` may be applied: only when that fetch is the one we
  // would send now (same offset, last fetched epoch and leader epoch). An answer to an
  // earlier fetch (resent after a timeout, overtaken, or sent before a truncation) is
  // dropped, as Kafka's fetcher drops a response whose fetch offset no longer matches:
  // a stale diverging epoch would otherwise cut records fetched since, below the high
  // watermark of an ISR member.
  bool IsCurrent(const FollowerFetch& answered, const EpochHistory& epochs,
                 int64_t log_end_offset) const;

  struct Truncation {
    int64_t offset = 0;     // truncate the log to this end (never above the log end)
    bool complete = false;  // false: fetch again, the leader will say more (Kafka's
                            // intermediate truncation when we do not know its epoch)
  };
  // Where to truncate for the leader's diverging epoch: when we know that epoch, the lower
  // of the leader's end offset for it and ours; when we do not, the end of our largest
  // epoch below it, to ask again from there; with no epoch at all, the leader's end offset.
  static Truncation TruncationFor(const EpochEndOffset& diverging, const EpochHistory& epochs,
                                  int64_t log_end_offset);

  // The log was truncated to `log_end_offset`: the high watermark does not stay above it.
  void OnTruncated(int64_t log_end_offset);
  // A fetch answer was applied (records appended, or none): high watermark = min(the
  // leader's, our log end). It may move back (a new leader's may lag the old one's).
  int64_t OnFetchAnswer(int64_t leader_high_watermark, int64_t log_end_offset);

 private:
  int32_t self_;
  int32_t leader_;
  int32_t leader_epoch_;
  int64_t high_watermark_;
};

}  // namespace runnel::storaged::replication
