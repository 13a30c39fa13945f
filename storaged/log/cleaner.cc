#include "storaged/log/cleaner.h"

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>

#include "common/log/log.h"
#include "common/record/control.h"
#include "common/util/big_endian.h"
#include "common/util/crc32c.h"
#include "storaged/log/file_names.h"

namespace runnel::storaged {
namespace {

using record::BatchView;
using record::ByteSpan;

const log::ModuleLogger kLog("storaged.cleaner");

// Reads are this large (or one batch, when larger), and cleaned output is written in appends
// of about this size.
constexpr size_t kIoChunk = 1 << 20;

int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b) {
    return std::numeric_limits<int64_t>::max();
  }
  return a + b;
}

// A record's timestamp: the batch's base timestamp plus its delta (wrapping as Kafka's long
// arithmetic does; the builder subtracts the same way).
int64_t RecordTimestamp(const BatchView& batch, const record::Record& r) {
  return int64_t(uint64_t(batch.base_timestamp()) + uint64_t(r.timestamp_delta));
}

// The offset map's key: SHA-256 of the record key cut to 128 bits. Kafka keys its map by a
// digest too (MD5): entries have a fixed size whatever the keys' sizes, and a collision, which
// would drop the record of another key, is out of reach even for keys chosen to collide.
struct KeyDigest {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const KeyDigest&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const KeyDigest& d) {
    return H::combine(std::move(h), d.hi, d.lo);
  }
};

// Key digest -> the last offset seen for it, in one pass.
class OffsetMap {
 public:
  OffsetMap() : ctx_(EVP_MD_CTX_new()) {}
  ~OffsetMap() { EVP_MD_CTX_free(ctx_); }
  OffsetMap(const OffsetMap&) = delete;
  OffsetMap& operator=(const OffsetMap&) = delete;

  StatusOr<KeyDigest> Digest(ByteSpan key) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1 ||
        EVP_DigestUpdate(ctx_, key.data(), key.size()) != 1 ||
        EVP_DigestFinal_ex(ctx_, md, &len) != 1 || len < 16) {
      return absl::InternalError("SHA-256 of a record key failed");
    }
    KeyDigest d;
    std::memcpy(&d.hi, md, 8);
    std::memcpy(&d.lo, md + 8, 8);
    return d;
  }
  void Put(const KeyDigest& d, int64_t offset) { map_[d] = offset; }
  std::optional<int64_t> Get(const KeyDigest& d) const {
    auto it = map_.find(d);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  size_t size() const { return map_.size(); }

 private:
  EVP_MD_CTX* ctx_;
  absl::flat_hash_map<KeyDigest, int64_t> map_;
};

// The aborted transactions of every segment of `segments` ending after `from` whose marker
// is at or after `from`, by first offset (duplicates dropped). Aborts are rare and the
// entries live on the heap, so all later segments are read, the active one included (an
// aborted transaction's data may lie below its marker's segment).
std::vector<AbortedTxn> CollectAborted(const std::vector<std::shared_ptr<Segment>>& segments,
                                       int64_t from) {
  std::vector<AbortedTxn> out;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i + 1 < segments.size() && segments[i + 1]->base_offset() <= from) continue;
    for (const AbortedTxn& txn : segments[i]->AbortedTxns()) {
      if (txn.last_offset >= from) out.push_back(txn);
    }
  }
  std::sort(out.begin(), out.end(), [](const AbortedTxn& a, const AbortedTxn& b) {
    return a.first_offset != b.first_offset ? a.first_offset < b.first_offset
                                            : a.producer_id < b.producer_id;
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The control type of a control batch's record (its key: int16 version, int16 type); nullopt
// for an empty batch (one compaction left) or an unreadable key.
StatusOr<std::optional<int16_t>> ControlType(const BatchView& batch) {
  std::optional<int16_t> type;
  RUNNEL_RETURN_IF_ERROR(record::ForEachRecord(batch, [&](const record::Record& r) {
    if (r.key && r.key->size() >= 4) type = int16_t(LoadBigEndian16(r.key->data() + 2));
    return false;
  }));
  return type;
}

// Follows the transactions through the batches of one pass, in offset order (Kafka's
// CleanedTransactionMetadata): which data batches an abort undid, and which markers end a
// transaction of which no data was met (the marker may then go, after its delete horizon).
// Only completed transactions lie below the cleanable range's end (the last stable offset
// bounds it), so a transactional batch not known aborted there is committed.
class TxnTracker {
 public:
  explicit TxnTracker(std::vector<AbortedTxn> aborted) : pending_(aborted.begin(), aborted.end()) {}

  // A data batch: whether an aborted transaction holds it.
  bool OnDataBatch(const BatchView& batch) {
    StartAbortedUpTo(batch.last_offset());
    if (!batch.is_transactional()) return false;
    auto it = aborted_.find(batch.producer_id());
    if (it != aborted_.end()) {
      it->second.data_seen = true;
      return true;
    }
    committed_.insert(batch.producer_id());
    return false;
  }
  // A control batch: whether its transaction has no data left in the log (an empty batch,
  // already cleaned, neither). An ABORT whose data was met keeps its index entry (listed in
  // kept_aborted(), by marker offset).
  StatusOr<bool> OnControlBatch(const BatchView& batch) {
    StartAbortedUpTo(batch.last_offset());
    RUNNEL_ASSIGN_OR_RETURN(std::optional<int16_t> type, ControlType(batch));
    if (!type) return true;
    const int64_t pid = batch.producer_id();
    if (*type == record::kControlTypeAbort) {
      auto it = aborted_.find(pid);
      if (it == aborted_.end()) return true;
      const bool data_seen = it->second.data_seen;
      aborted_.erase(it);
      if (data_seen) kept_aborted_.insert(batch.base_offset());
      return !data_seen;
    }
    if (*type == record::kControlTypeCommit) return committed_.erase(pid) == 0;
    return false;  // another control type: kept
  }
  // The markers (by offset) of aborted transactions whose index entries stay.
  const absl::flat_hash_set<int64_t>& kept_aborted() const { return kept_aborted_; }

 private:
  struct Aborted {
    bool data_seen = false;
  };
  void StartAbortedUpTo(int64_t offset) {
    while (!pending_.empty() && pending_.front().first_offset <= offset) {
      aborted_.try_emplace(pending_.front().producer_id);
      pending_.pop_front();
    }
  }

  std::deque<AbortedTxn> pending_;                 // not yet started, by first offset
  absl::flat_hash_map<int64_t, Aborted> aborted_;  // producer id -> its aborted transaction
  absl::flat_hash_set<int64_t> committed_;         // producers with committed data met
  absl::flat_hash_set<int64_t> kept_aborted_;
};

// The header alone of `batch`, no records (Kafka's empty batch, kept when compaction removes
// every record of a producer's last batch so its sequence and epoch survive): same offsets,
// producer fields, leader epoch, timestamp type and max timestamp; no codec, no base
// timestamp, no delete horizon.
StatusOr<std::vector<uint8_t>> EmptyBatchOf(const BatchView& batch) {
  record::BatchBuilder::Options o;
  o.base_offset = batch.base_offset();
  o.partition_leader_epoch = batch.partition_leader_epoch();
  o.producer_id = batch.producer_id();
  o.producer_epoch = batch.producer_epoch();
  o.base_sequence = batch.base_sequence();
  o.transactional = batch.is_transactional();
  o.control = batch.is_control();
  o.timestamp_type = batch.timestamp_type();
  RUNNEL_ASSIGN_OR_RETURN(std::vector<uint8_t> out,
                          record::BatchBuilder(o).Build(batch.last_offset_delta()));
  if (out.size() != record::kBatchHeaderSize) {
    return absl::InternalError(fmt::format("empty batch of {} bytes", out.size()));
  }
  constexpr size_t kCrcAt = 17;
  constexpr size_t kAttributesAt = 21;
  constexpr size_t kMaxTimestampAt = 35;
  StoreBigEndian(out.data() + kMaxTimestampAt, uint64_t(batch.max_timestamp()), 8);
  StoreBigEndian32(out.data() + kCrcAt,
                   crc32c::Value(out.data() + kAttributesAt, out.size() - kAttributesAt));
  return out;
}

// Reads the batches of [start, end) of a segment in order, a chunk at a time, checking
// lengths, magic and CRC (a corrupt batch must not be rewritten with a fresh CRC).
class BatchReader {
 public:
  BatchReader(const Segment& segment, int64_t start, int64_t end)
      : segment_(segment), next_(start), end_(end) {}

  // The next batch (valid until the next call), or nullopt at the end.
  StatusOr<std::optional<BatchView>> Next() {
    if (next_ >= end_) return std::optional<BatchView>();
    if (end_ - next_ < int64_t(record::kBatchHeaderSize)) {
      return Corrupt(fmt::format("{} stray bytes at the end", end_ - next_));
    }
    RUNNEL_RETURN_IF_ERROR(Ensure(int64_t(record::kBatchHeaderSize)));
    int64_t size =
        int64_t(static_cast<int32_t>(LoadBigEndian32(Here() + 8))) + int64_t(record::kLogOverhead);
    if (size < int64_t(record::kBatchHeaderSize) || next_ + size > end_) {
      return Corrupt(fmt::format("bad batch length {}", size - int64_t(record::kLogOverhead)));
    }
    RUNNEL_RETURN_IF_ERROR(Ensure(size));
    StatusOr<BatchView> view = BatchView::Parse(ByteSpan(Here(), size_t(size)));
    if (!view.ok()) return Corrupt(std::string(view.status().message()));
    if (!view->CrcValid()) return Corrupt("CRC mismatch");
    position_ = next_;
    next_ += size;
    return std::optional<BatchView>(*view);
  }
  // Where the batch last returned starts.
  int64_t position() const { return position_; }

 private:
  const uint8_t* Here() const { return buf_.data() + (next_ - buf_start_); }
  Status Ensure(int64_t n) {
    if (next_ >= buf_start_ && next_ + n <= buf_start_ + int64_t(buf_.size())) {
      return absl::OkStatus();
    }
    int64_t length = std::min(std::max(n, int64_t(kIoChunk)), end_ - next_);
    RUNNEL_ASSIGN_OR_RETURN(buf_, segment_.ReadBytes(next_, int32_t(length)));
    buf_start_ = next_;
    return absl::OkStatus();
  }
  Status Corrupt(std::string why) const {
    return absl::DataLossError(
        fmt::format("{}: batch at byte {}: {}", segment_.log_path(), next_, why));
  }

  const Segment& segment_;
  int64_t next_;
  int64_t end_;
  int64_t position_ = 0;
  std::vector<uint8_t> buf_;
  int64_t buf_start_ = 0;
};

// Deletes the files of a cleaned copy at `base` (and forgets the .log's handle, so a later
// copy at the same base is not written through a handle of the unlinked file).
void RemoveCleanedFiles(Log& log, int64_t base) {
  for (std::string_view kind : {kLogSuffix, kIndexSuffix, kTimeIndexSuffix, kTxnIndexSuffix}) {
    std::string path = SegmentFilePath(log.dir(), base, kind) + std::string(kCleanedSuffix);
    if (kind == kLogSuffix) log.files()->Forget(path);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      kLog()->warn("[{}] unlink {}: {}", log.tp().ToString(), path, std::strerror(errno));
    }
  }
}

// The cleaned copy of a group of consecutive segments, named after the first. For a group of
// one it is created at the first batch that changes: until then the segment is unchanged and
// needs no copy, and the batches before it are copied then. A group of several is always
// copied (StartNow), since merging is itself the change.
class CleanedWriter {
 public:
  CleanedWriter(Log& log, const Segment& source, const LogConfig& config, CleanerStats* stats,
                int64_t created_ms)
      : log_(log), source_(source), config_(config), stats_(stats), created_ms_(created_ms) {}
  Status StartNow() { return Start(0); }
  // A copy of the whole source when not started yet (its transaction index changes).
  Status StartWhole() {
    if (out_ != nullptr) return absl::OkStatus();
    return Start(source_.size());
  }
  ~CleanedWriter() { Abandon(); }

  // The next batch of the source stays as it is.
  Status Keep(const BatchView& batch) {
    if (out_ == nullptr) return absl::OkStatus();
    return Add(batch.bytes());
  }
  // The next batch of the source, at `position`, is replaced by `bytes` (dropped when empty).
  Status Replace(int64_t position, ByteSpan bytes) {
    if (out_ == nullptr) RUNNEL_RETURN_IF_ERROR(Start(position));
    if (bytes.empty()) return absl::OkStatus();
    return Add(bytes);
  }
  // The finished copy, ready for ReplaceSegment, with `aborted` as its transaction index;
  // nullptr when nothing changed.
  StatusOr<std::unique_ptr<Segment>> Finish(const std::vector<AbortedTxn>& aborted) {
    if (out_ == nullptr) return std::unique_ptr<Segment>();
    RUNNEL_RETURN_IF_ERROR(WritePending());
    for (const AbortedTxn& txn : aborted) RUNNEL_RETURN_IF_ERROR(out_->AppendAbortedTxn(txn));
    RUNNEL_RETURN_IF_ERROR(out_->OnRoll());
    out_->set_created_ms(created_ms_);
    return std::move(out_);
  }
  // Drops an unfinished copy's files.
  void Abandon() {
    if (out_ == nullptr) return;
    Status s = out_->Delete();
    if (!s.ok()) kLog()->warn("[{}] {}", log_.tp().ToString(), s.message());
    out_.reset();
  }

 private:
  Status Start(int64_t unchanged_end) {
    // A copy left by an earlier pass that failed must not be appended to.
    RemoveCleanedFiles(log_, source_.base_offset());
    RUNNEL_ASSIGN_OR_RETURN(out_, Segment::Open(log_.dir(), source_.base_offset(),
                                                config_.segment_index_bytes, /*create=*/true,
                                                /*active=*/true, log_.files(), kCleanedSuffix));
    BatchReader prefix(source_, 0, unchanged_end);
    while (true) {
      RUNNEL_ASSIGN_OR_RETURN(std::optional<BatchView> batch, prefix.Next());
      if (!batch) break;
      RUNNEL_RETURN_IF_ERROR(Add(batch->bytes()));
    }
    return absl::OkStatus();
  }
  Status Add(ByteSpan bytes) {
    pending_.insert(pending_.end(), bytes.begin(), bytes.end());
    if (pending_.size() >= kIoChunk) return WritePending();
    return absl::OkStatus();
  }
  Status WritePending() {
    if (pending_.empty()) return absl::OkStatus();
    RUNNEL_ASSIGN_OR_RETURN(std::vector<BatchView> views, record::SplitBatches(pending_));
    RUNNEL_RETURN_IF_ERROR(out_->Append(pending_, views, config_.index_interval_bytes));
    stats_->bytes_written += int64_t(pending_.size());
    pending_.clear();
    return absl::OkStatus();
  }

  Log& log_;
  const Segment& source_;
  const LogConfig& config_;
  CleanerStats* stats_;
  int64_t created_ms_;
  std::unique_ptr<Segment> out_;
  std::vector<uint8_t> pending_;  // whole batches not yet appended to out_
};

// The parts of a log the cleaner looks at, from one snapshot of its segments.
struct CleanableRange {
  int64_t log_start = 0;
  int64_t first_dirty = 0;
  int64_t first_uncleanable = 0;
  int64_t clean_bytes = 0;
  int64_t dirty_bytes = 0;
  bool max_lag_passed = false;  // a dirty record has waited max.compaction.lag.ms

  double ratio() const {
    int64_t total = clean_bytes + dirty_bytes;
    return total > 0 ? double(dirty_bytes) / double(total) : 0.0;
  }
};

// The largest timestamp of a segment, or when its batches carry none, its file's mtime (as
// Kafka's LogSegment.largestTimestamp).
int64_t LargestTimestamp(const Segment& segment) {
  if (segment.max_timestamp() >= 0) return segment.max_timestamp();
  std::string path = segment.log_path();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return segment.created_ms();
  return int64_t(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

// `segments` is a snapshot of the log's segments, the active one last.
CleanableRange FindCleanableRange(const Log& log,
                                  const std::vector<std::shared_ptr<Segment>>& segments,
                                  const LogConfig& config, int64_t now) {
  CleanableRange r;
  LogState state = log.State();
  r.log_start = state.log_start_offset;
  r.first_dirty = log.first_dirty_offset();
  // Progress from before a truncation or below the log start means nothing: start over.
  if (r.first_dirty < r.log_start || r.first_dirty > state.log_end_offset) {
    r.first_dirty = r.log_start;
  }
  // Never past the segment holding the last stable offset (Kafka's cleanableOffsets, rounded
  // down to a segment base as its LogToClean does): an open transaction's data is neither
  // compacted nor mapped (it may yet be aborted), and the segment holding its start waits
  // whole, so it is not counted dirty again after each pass.
  r.first_uncleanable = segments.back()->base_offset();
  const int64_t last_stable = log.LastStableOffset();
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    if (segments[i + 1]->base_offset() > last_stable) {
      r.first_uncleanable = segments[i]->base_offset();
      break;
    }
  }
  const int64_t min_lag = std::max<int64_t>(config.min_compaction_lag_ms, 0);
  const int64_t max_lag = std::max<int64_t>(config.max_compaction_lag_ms, 0);
  int64_t earliest_dirty = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    const Segment& s = *segments[i];
    int64_t end = segments[i + 1]->base_offset();
    if (end <= r.first_dirty) continue;
    // (An empty segment, all of it cleaned away, has nothing to wait for.)
    if (min_lag > 0 && s.size() > 0 && now - LargestTimestamp(s) < min_lag) {
      r.first_uncleanable = std::min(r.first_uncleanable, s.base_offset());
    }
    if (s.rolling_timestamp() > 0) earliest_dirty = std::min(earliest_dirty, s.rolling_timestamp());
  }
  r.first_uncleanable = std::max(r.first_uncleanable, r.first_dirty);
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    const Segment& s = *segments[i];
    int64_t end = segments[i + 1]->base_offset();
    if (end <= r.log_start) continue;  // wholly below the log start: retention's to remove
    if (end <= r.first_dirty) {
      r.clean_bytes += s.size();
    } else if (s.base_offset() < r.first_uncleanable) {
      r.dirty_bytes += s.size();
    }
  }
  r.max_lag_passed =
      earliest_dirty != std::numeric_limits<int64_t>::max() && now - earliest_dirty > max_lag;
  return r;
}

bool ShouldClean(const CleanableRange& r, const LogConfig& config) {
  return (r.max_lag_passed && r.dirty_bytes > 0) || r.ratio() > config.min_cleanable_dirty_ratio;
}

// Step 2: maps each key of [first dirty, first uncleanable) to its last offset. Returns the
// end of what was mapped: the offset after the last batch mapped, or the next segment's base
// when a whole segment was (so a gap left by earlier cleaning is not mapped again).
StatusOr<int64_t> BuildOffsetMap(const std::vector<std::shared_ptr<Segment>>& segments,
                                 const CleanableRange& r, size_t max_entries, OffsetMap* map,
                                 CleanerStats* stats) {
  // Records of aborted transactions are not mapped: they go, and must not make the earlier
  // records of their keys go.
  TxnTracker txns(CollectAborted(segments, r.first_dirty));
  int64_t map_end = r.first_dirty;
  bool mapped_any = false;
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    const Segment& s = *segments[i];
    int64_t next_base = segments[i + 1]->base_offset();
    if (next_base <= r.first_dirty) continue;
    if (s.base_offset() >= r.first_uncleanable) break;
    int64_t start =
        r.first_dirty > s.base_offset() ? s.offset_index().Lookup(r.first_dirty).position : 0;
    BatchReader reader(s, start, s.size());
    bool full = false;
    while (!full) {
      RUNNEL_ASSIGN_OR_RETURN(std::optional<BatchView> batch, reader.Next());
      if (!batch) break;
      if (batch->last_offset() < r.first_dirty) continue;
      if (batch->base_offset() >= r.first_uncleanable) {
        full = true;  // not expected: the uncleanable offset is a segment's base
        break;
      }
      stats->bytes_read += int64_t(batch->size_in_bytes());
      bool aborted = false;
      if (batch->is_control()) {
        RUNNEL_RETURN_IF_ERROR(txns.OnControlBatch(*batch).status());
      } else {
        aborted = txns.OnDataBatch(*batch);
      }
      if (!batch->is_control() && !aborted) {
        // The record count bounds the keys a batch adds.
        if (mapped_any && map->size() + size_t(std::max(batch->record_count(), 0)) > max_entries) {
          full = true;
          break;
        }
        Status digest_status = absl::OkStatus();
        RUNNEL_RETURN_IF_ERROR(record::ForEachRecord(*batch, [&](const record::Record& rec) {
          int64_t offset = batch->base_offset() + rec.offset_delta;
          if (offset < r.first_dirty || offset < r.log_start || !rec.key) return true;
          StatusOr<KeyDigest> d = map->Digest(*rec.key);
          if (!d.ok()) {
            digest_status = d.status();
            return false;
          }
          map->Put(*d, offset);
          return true;
        }));
        RUNNEL_RETURN_IF_ERROR(digest_status);
        mapped_any = true;
      }
      map_end = std::max(map_end, batch->last_offset() + 1);
    }
    if (full) break;
    map_end = std::max(map_end, std::min(next_base, r.first_uncleanable));
  }
  return map_end;
}

struct PassContext {
  OffsetMap* map;
  int64_t clean_end;  // records at or after it are kept as they are
  int64_t log_start;
  int64_t now;
  int64_t delete_retention_ms;
  TxnTracker* txns;
  const absl::flat_hash_map<int64_t, Log::ProducerLastRecord>* producers;
  CleanerStats* stats;
};

// `batch` rebuilt with the records `keep` says (all when null), its header fields kept, and
// the delete horizon given (or none).
StatusOr<std::vector<uint8_t>> RebuildBatch(const BatchView& batch, const std::vector<bool>* keep,
                                            std::optional<int64_t> delete_horizon_ms) {
  record::BatchBuilder::Options o;
  o.base_offset = batch.base_offset();
  o.compression = batch.compression();
  o.timestamp_type = batch.timestamp_type();
  o.partition_leader_epoch = batch.partition_leader_epoch();
  o.producer_id = batch.producer_id();
  o.producer_epoch = batch.producer_epoch();
  o.base_sequence = batch.base_sequence();
  o.transactional = batch.is_transactional();
  o.control = batch.is_control();
  o.delete_horizon_ms = delete_horizon_ms;
  record::BatchBuilder builder(o);
  size_t i = 0;
  RUNNEL_RETURN_IF_ERROR(record::ForEachRecord(batch, [&](const record::Record& rec) {
    if (keep == nullptr || (i < keep->size() && (*keep)[i])) {
      builder.Add(rec.offset_delta, RecordTimestamp(batch, rec), rec.key, rec.value, rec.headers);
    }
    ++i;
    return true;
  }));
  RUNNEL_ASSIGN_OR_RETURN(std::vector<uint8_t> rebuilt, builder.Build(batch.last_offset_delta()));
  // A LogAppendTime batch's max timestamp is the append time, not one of its records'.
  if (batch.timestamp_type() == record::TimestampType::kLogAppendTime) {
    record::SetLogAppendTime(rebuilt, batch.max_timestamp());
  }
  return rebuilt;
}

// Step 3 for one data batch: which records stay. Returns the batch to write instead, or
// nullopt when it stays as it is (an empty vector: it goes).
StatusOr<std::optional<std::vector<uint8_t>>> FilterBatch(const BatchView& batch,
                                                          const PassContext& ctx) {
  const bool horizon_passed = batch.has_delete_horizon() && ctx.now >= batch.base_timestamp();
  std::vector<bool> keep;
  keep.reserve(size_t(std::max(batch.record_count(), 0)));
  int removed = 0;
  int tombstones_removed = 0;
  bool kept_tombstone = false;
  Status digest_status = absl::OkStatus();
  RUNNEL_RETURN_IF_ERROR(record::ForEachRecord(batch, [&](const record::Record& rec) {
    int64_t offset = batch.base_offset() + rec.offset_delta;
    bool retain = true;
    if (offset >= ctx.clean_end) {
      retain = true;
    } else if (offset < ctx.log_start || !rec.key) {
      retain = false;
    } else {
      StatusOr<KeyDigest> d = ctx.map->Digest(*rec.key);
      if (!d.ok()) {
        digest_status = d.status();
        return false;
      }
      std::optional<int64_t> latest = ctx.map->Get(*d);
      retain = !(latest && *latest > offset) && (rec.value || !horizon_passed);
    }
    keep.push_back(retain);
    if (!retain) {
      ++removed;
      if (!rec.value) ++tombstones_removed;
    } else if (!rec.value && offset < ctx.clean_end) {
      kept_tombstone = true;
    }
    return true;
  }));
  RUNNEL_RETURN_IF_ERROR(digest_status);
  ctx.stats->records_removed += removed;
  ctx.stats->tombstones_removed += tombstones_removed;
  const bool set_horizon = kept_tombstone && !batch.has_delete_horizon();
  if (removed == 0 && !set_horizon) return std::optional<std::vector<uint8_t>>();
  if (removed == int(keep.size()))
    return std::optional<std::vector<uint8_t>>(std::vector<uint8_t>());
  std::optional<int64_t> horizon;
  if (batch.has_delete_horizon()) {
    horizon = batch.base_timestamp();
  } else if (set_horizon) {
    horizon = SaturatingAdd(ctx.now, ctx.delete_retention_ms);
  }
  RUNNEL_ASSIGN_OR_RETURN(std::vector<uint8_t> rebuilt, RebuildBatch(batch, &keep, horizon));
  return std::optional<std::vector<uint8_t>>(std::move(rebuilt));
}

// Step 3 for one batch below the clean end, Kafka's batch rules. `txn_done`: a data batch of
// an aborted transaction, or a marker whose transaction has no data left. Returns the batch
// to write instead, or nullopt when it stays as it is (an empty vector: it goes).
StatusOr<std::optional<std::vector<uint8_t>>> RetainBatch(const BatchView& batch, bool txn_done,
                                                          const PassContext& ctx) {
  using Result = std::optional<std::vector<uint8_t>>;
  // The batch holding a producer's last data (or, when none is kept, its marker of the
  // current epoch) stays, emptied if need be, so the producer state rebuilt from the log
  // keeps the producer's sequence and epoch.
  bool last_of_producer = false;
  if (batch.producer_id() >= 0) {
    auto it = ctx.producers->find(batch.producer_id());
    if (it != ctx.producers->end()) {
      last_of_producer = it->second.last_data_offset >= 0
                             ? batch.last_offset() == it->second.last_data_offset
                             : batch.is_control() && batch.producer_epoch() == it->second.epoch;
    }
  }
  const auto empty_or_gone = [&]() -> StatusOr<Result> {
    if (!last_of_producer) return Result(std::vector<uint8_t>());
    RUNNEL_ASSIGN_OR_RETURN(std::vector<uint8_t> empty, EmptyBatchOf(batch));
    return Result(std::move(empty));
  };
  // An empty batch (left by an earlier pass) stays only as a producer's last.
  if (batch.record_count() == 0)
    return last_of_producer ? Result() : Result(std::vector<uint8_t>());
  if (batch.is_control()) {
    if (!txn_done) return Result();  // data of its transaction remains
    if (batch.has_delete_horizon()) {
      if (ctx.now < batch.base_timestamp()) return Result();
      ++ctx.stats->markers_removed;
      return empty_or_gone();
    }
    // The first pass to find its transaction empty: it goes after delete.retention.ms, so a
    // consumer reading meanwhile still sees the transaction end (KIP-534, as tombstones).
    RUNNEL_ASSIGN_OR_RETURN(
        std::vector<uint8_t> rebuilt,
        RebuildBatch(batch, nullptr, SaturatingAdd(ctx.now, ctx.delete_retention_ms)));
    return Result(std::move(rebuilt));
  }
  if (txn_done) {
    ctx.stats->records_removed += batch.record_count();
    ctx.stats->aborted_records_removed += batch.record_count();
    return empty_or_gone();
  }
  RUNNEL_ASSIGN_OR_RETURN(Result filtered, FilterBatch(batch, ctx));
  if (filtered && filtered->empty()) return empty_or_gone();
  return filtered;
}

// Step 3 for one group of consecutive segments: their one cleaned copy, or nullptr when the
// group is one segment and nothing in it changes. The copy's transaction index keeps the
// aborted transactions whose markers are past the clean end or whose data this pass met
// (Kafka's rule: an abort whose data is gone leaves the index, its marker later the log).
StatusOr<std::unique_ptr<Segment>> CleanGroup(Log& log,
                                              const std::vector<std::shared_ptr<Segment>>& group,
                                              const LogConfig& config, const PassContext& ctx) {
  CleanedWriter writer(log, *group.front(), config, ctx.stats, group.back()->created_ms());
  if (group.size() > 1) RUNNEL_RETURN_IF_ERROR(writer.StartNow());
  for (const std::shared_ptr<Segment>& segment : group) {
    BatchReader reader(*segment, 0, segment->size());
    while (true) {
      RUNNEL_ASSIGN_OR_RETURN(std::optional<BatchView> batch, reader.Next());
      if (!batch) break;
      ctx.stats->bytes_read += int64_t(batch->size_in_bytes());
      // Every batch goes through the tracker, in order, so it knows each transaction's data.
      bool txn_done = false;
      if (batch->is_control()) {
        RUNNEL_ASSIGN_OR_RETURN(txn_done, ctx.txns->OnControlBatch(*batch));
      } else {
        txn_done = ctx.txns->OnDataBatch(*batch);
      }
      if (batch->base_offset() >= ctx.clean_end) {
        RUNNEL_RETURN_IF_ERROR(writer.Keep(*batch));
        continue;
      }
      RUNNEL_ASSIGN_OR_RETURN(std::optional<std::vector<uint8_t>> replacement,
                              RetainBatch(*batch, txn_done, ctx));
      if (!replacement) {
        RUNNEL_RETURN_IF_ERROR(writer.Keep(*batch));
      } else {
        RUNNEL_RETURN_IF_ERROR(writer.Replace(reader.position(), *replacement));
      }
    }
  }
  std::vector<AbortedTxn> old_entries;
  std::vector<AbortedTxn> entries;
  for (const std::shared_ptr<Segment>& segment : group) {
    for (const AbortedTxn& txn : segment->AbortedTxns()) {
      old_entries.push_back(txn);
      if (txn.last_offset >= ctx.clean_end || ctx.txns->kept_aborted().contains(txn.last_offset)) {
        entries.push_back(txn);
      }
    }
  }
  if (entries != old_entries) RUNNEL_RETURN_IF_ERROR(writer.StartWhole());
  return writer.Finish(entries);
}

}  // namespace

std::vector<std::vector<std::shared_ptr<Segment>>> GroupSegmentsBySize(
    const std::vector<std::shared_ptr<Segment>>& segments, int64_t max_size,
    int64_t max_index_size) {
  // The last offset a segment may hold: up to the next one's base, else its own records.
  auto last_offset = [&](size_t i) -> int64_t {
    if (i + 1 < segments.size()) return segments[i + 1]->base_offset() - 1;
    return std::max(segments[i]->next_offset() - 1, segments[i]->base_offset());
  };
  std::vector<std::vector<std::shared_ptr<Segment>>> groups;
  size_t i = 0;
  while (i < segments.size()) {
    std::vector<std::shared_ptr<Segment>> group{segments[i]};
    int64_t log_size = segments[i]->size();
    int64_t offset_index_size = segments[i]->offset_index().SizeInBytes();
    int64_t time_index_size = segments[i]->time_index().SizeInBytes();
    const int64_t base = segments[i]->base_offset();
    size_t j = i + 1;
    while (j < segments.size()) {
      const Segment& next = *segments[j];
      if (log_size + next.size() > max_size) break;
      if (offset_index_size + next.offset_index().SizeInBytes() > max_index_size) break;
      if (time_index_size + next.time_index().SizeInBytes() > max_index_size) break;
      // Every offset of the group must fit the 32-bit relative offsets of the first's base.
      if (last_offset(j) - base > int64_t{std::numeric_limits<int32_t>::max()}) break;
      log_size += next.size();
      offset_index_size += next.offset_index().SizeInBytes();
      time_index_size += next.time_index().SizeInBytes();
      group.push_back(segments[j]);
      ++j;
    }
    groups.push_back(std::move(group));
    i = j;
  }
  return groups;
}

namespace {

// Whether a non-active segment of the snapshot `segments` has left the log since (retention
// or truncation): reading it may then fail (its file unlinked), which is not the log's fault.
bool SegmentsLeft(const Log& log, const std::vector<std::shared_ptr<Segment>>& segments) {
  std::vector<std::shared_ptr<Segment>> now = log.Segments();
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    if (std::find(now.begin(), now.end(), segments[i]) == now.end()) return true;
  }
  return false;
}

}  // namespace

Cleaner::Cleaner(CleanerOptions options) : options_(std::move(options)) {}

int64_t Cleaner::Now() const {
  if (options_.now_ms) return options_.now_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double Cleaner::DirtyRatio(const Log& log) const {
  std::vector<std::shared_ptr<Segment>> segments = log.Segments();
  if (segments.size() < 2) return 0.0;
  return FindCleanableRange(log, segments, log.config(), Now()).ratio();
}

bool Cleaner::NeedsCleaning(const Log& log) const {
  const LogConfig config = log.config();
  if (!config.cleanup_compact) return false;
  std::vector<std::shared_ptr<Segment>> segments = log.Segments();
  if (segments.size() < 2) return false;
  return ShouldClean(FindCleanableRange(log, segments, config, Now()), config);
}

bool Cleaner::IsUncleanable(const std::shared_ptr<Log>& log) {
  MutexLock lock(&mu_);
  std::erase_if(uncleanable_, [](const std::weak_ptr<Log>& w) { return w.expired(); });
  for (const std::weak_ptr<Log>& w : uncleanable_) {
    if (w.lock() == log) return true;
  }
  return false;
}

StatusOr<bool> Cleaner::CleanOnce(const std::vector<std::shared_ptr<Log>>& logs,
                                  std::vector<std::shared_ptr<Segment>>* to_unlink) {
  const int64_t now = Now();
  std::shared_ptr<Log> filthiest;
  double filthiest_ratio = -1.0;
  for (const std::shared_ptr<Log>& log : logs) {
    if (log == nullptr) continue;
    const LogConfig config = log->config();
    if (!config.cleanup_compact || IsUncleanable(log)) continue;
    std::vector<std::shared_ptr<Segment>> segments = log->Segments();
    if (segments.size() < 2) continue;
    CleanableRange r = FindCleanableRange(*log, segments, config, now);
    if (!ShouldClean(r, config)) continue;
    if (r.ratio() > filthiest_ratio) {
      filthiest = log;
      filthiest_ratio = r.ratio();
    }
  }
  if (filthiest == nullptr) return false;
  StatusOr<CleanerStats> stats = Clean(*filthiest, to_unlink);
  if (!stats.ok()) {
    {
      MutexLock lock(&mu_);
      uncleanable_.push_back(filthiest);
    }
    return Status(stats.status().code(),
                  fmt::format("[{}] cleaning failed, the partition will not be cleaned again "
                              "until restart: {}",
                              filthiest->tp().ToString(), stats.status().message()));
  }
  return !stats->aborted;
}

StatusOr<CleanerStats> Cleaner::Clean(Log& log, std::vector<std::shared_ptr<Segment>>* to_unlink) {
  const LogConfig config = log.config();
  const std::string name = log.tp().ToString();
  if (!config.cleanup_compact) {
    return absl::FailedPreconditionError(
        fmt::format("[{}] cleanup.policy does not include compact", name));
  }
  const int64_t now = Now();
  CleanerStats stats;
  // Read before anything else: a truncation from here on makes every swap of this pass fail.
  const uint64_t truncations = log.truncations();
  std::vector<std::shared_ptr<Segment>> segments = log.Segments();
  stats.end_offset = log.first_dirty_offset();
  if (segments.size() < 2) return stats;  // only the active segment, which is never cleaned
  const CleanableRange range = FindCleanableRange(log, segments, config, now);

  // A failure while the log changed under the pass aborts it; any other fails it.
  auto abort_or_fail = [&](const Status& s) -> StatusOr<CleanerStats> {
    if (!SegmentsLeft(log, segments)) return s;
    stats.aborted = true;
    kLog()->info("[{}] cleaning aborted: segments were removed meanwhile ({})", name, s.message());
    return stats;
  };
  OffsetMap map;
  StatusOr<int64_t> mapped =
      BuildOffsetMap(segments, range, options_.max_map_entries, &map, &stats);
  if (!mapped.ok()) return abort_or_fail(mapped.status());
  const int64_t map_end = *mapped;
  const int64_t clean_end = std::max(map_end, range.first_dirty);
  // The transactions of the segments cleaned (and after: an abort's marker may lie past
  // them), and the last batch of each producer, which stays.
  const int64_t first_base = segments.front()->base_offset();
  TxnTracker txns(CollectAborted(segments, first_base));
  const absl::flat_hash_map<int64_t, Log::ProducerLastRecord> producers =
      log.LastRecordsOfProducers();
  PassContext ctx{&map,  clean_end,  range.log_start, now, config.delete_retention_ms,
                  &txns, &producers, &stats};

  // The segments to clean: non-active, below the clean end, not wholly below the log start.
  std::vector<std::shared_ptr<Segment>> cleanable;
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    if (segments[i]->base_offset() >= clean_end) break;
    if (segments[i + 1]->base_offset() <= range.log_start) continue;
    cleanable.push_back(segments[i]);
  }
  // Consecutive segments are merged as Kafka's cleaner does, so a compacted log does not pile
  // up small segments.
  std::vector<std::vector<std::shared_ptr<Segment>>> groups =
      GroupSegmentsBySize(cleanable, config.segment_bytes, config.segment_index_bytes);

  for (const std::vector<std::shared_ptr<Segment>>& group : groups) {
    StatusOr<std::unique_ptr<Segment>> cleaned_or = CleanGroup(log, group, config, ctx);
    if (!cleaned_or.ok()) return abort_or_fail(cleaned_or.status());
    std::unique_ptr<Segment> cleaned = std::move(*cleaned_or);
    if (cleaned == nullptr) continue;
    const int64_t base = group.front()->base_offset();
    if (options_.before_swap) options_.before_swap(log, *group.front());
    // The map may name records a truncation removed since: their keys' older records must
    // stay. (The manager pauses cleaning around truncation; this catches what it missed.)
    if (log.State().log_end_offset < clean_end) {
      Status s = cleaned->Delete();
      if (!s.ok()) kLog()->warn("[{}] {}", name, s.message());
      stats.aborted = true;
      kLog()->info("[{}] cleaning aborted: the log was truncated below offset {}", name, clean_end);
      return stats;
    }
    Status swapped = log.ReplaceSegments(group, std::move(cleaned), to_unlink, truncations);
    if (!swapped.ok()) {
      RemoveCleanedFiles(log, base);
      if (swapped.code() == absl::StatusCode::kFailedPrecondition) {
        stats.aborted = true;
        kLog()->info("[{}] cleaning aborted: segment {} changed meanwhile", name,
                     OffsetFileStem(base));
        return stats;
      }
      return swapped;
    }
    stats.segments_cleaned += int64_t(group.size());
    ++stats.segments_written;
  }
  stats.end_offset = std::max(log.first_dirty_offset(), clean_end);
  log.set_first_dirty_offset(stats.end_offset);
  kLog()->log(stats.segments_cleaned > 0 ? spdlog::level::info : spdlog::level::debug,
              "[{}] cleaned up to offset {}: {} segment(s) rewritten into {}, {} bytes read, {} "
              "written, {} record(s) removed ({} tombstones, {} aborted), {} marker(s) removed",
              name, clean_end, stats.segments_cleaned, stats.segments_written, stats.bytes_read,
              stats.bytes_written, stats.records_removed, stats.tombstones_removed,
              stats.aborted_records_removed, stats.markers_removed);
  return stats;
}

}  // namespace runnel::storaged
