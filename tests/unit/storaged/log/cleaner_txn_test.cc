// The cleaner and transactions (Kafka's rules): the last stable offset bounds the cleanable
// range, aborted data goes, markers stay while their transaction has data and go after a
// delete horizon, a producer's last batch stays (emptied), the .txnindex follows.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/record/control.h"
#include "storaged/log/cleaner.h"
#include "storaged/log/log.h"
#include "tests/unit/storaged/log/log_test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;
using protocol::ErrorCode;
using runnel::testing::TempDir;
using testing::Span;

constexpr int64_t kA = 1000;
constexpr int64_t kB = 2000;
constexpr int64_t kP = 3000;
constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int64_t kRetention = 1000;  // delete.retention.ms

struct KV {
  std::string key;
  std::string value;
};

class CleanerTxnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.cleanup_compact = true;
    config_.cleanup_delete = false;
    config_.delete_retention_ms = kRetention;
    config_.segment_index_bytes = 4096;
    log_ = Open(/*clean=*/true);
    ASSERT_NE(log_, nullptr);
  }

  std::string LogDir() const { return dir_.path() + "/t-0"; }
  std::unique_ptr<Log> Open(bool clean, const std::string& dir = "") {
    LogOptions o;
    o.dir = dir.empty() ? LogDir() : dir;
    o.tp = {"t", 0};
    o.config = config_;
    o.files = &files_;
    o.now_ms = [this] { return now_; };
    StatusOr<std::unique_ptr<Log>> log =
        Log::Open(std::move(o), "AAAAAAAAAAAAAAAAAAAAAA", 0, 0, clean, nullptr);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }

  // The next append goes to a new segment.
  void RollNext() {
    LogConfig c = config_;
    c.segment_ms = -1'000'000;
    log_->SetConfig(c);
  }
  void Check(const AppendResult& r) {
    EXPECT_EQ(r.error, ErrorCode::kNone) << r.error_message;
    log_->SetConfig(config_);
  }
  // One batch of `kvs`: plain when pid < 0, else of that producer (transactional or only
  // idempotent) from `seq`. Returns its base offset.
  int64_t Data(const std::vector<KV>& kvs, int64_t pid = -1, int32_t seq = -1,
               bool transactional = false) {
    record::BatchBuilder::Options o;
    if (pid >= 0) {
      o.producer_id = pid;
      o.producer_epoch = 0;
      o.base_sequence = seq;
      o.transactional = transactional;
    }
    record::BatchBuilder b(o);
    for (const KV& kv : kvs) b.Add(now_, Span(kv.key), Span(kv.value));
    StatusOr<std::vector<uint8_t>> bytes = b.Build();
    EXPECT_TRUE(bytes.ok());
    AppendResult r = log_->Append(*bytes, 0);
    Check(r);
    return r.base_offset;
  }
  int64_t Txn(int64_t pid, int32_t seq, const std::vector<KV>& kvs) {
    return Data(kvs, pid, seq, /*transactional=*/true);
  }
  int64_t Marker(int64_t pid, bool commit, int16_t epoch = 0, int transaction_version = 0) {
    std::vector<uint8_t> bytes =
        record::BuildEndTxnMarkerBatch(pid, epoch, record::EndTxnMarker{commit, 1}, now_);
    AppendResult r = log_->Append(bytes, 0, AppendOrigin::kCoordinator, transaction_version);
    Check(r);
    return r.base_offset;
  }

  StatusOr<CleanerStats> Clean() {
    CleanerOptions o;
    o.now_ms = [this] { return now_; };
    Cleaner cleaner(std::move(o));
    StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
    for (const std::shared_ptr<Segment>& s : to_unlink_) EXPECT_TRUE(s->Delete().ok());
    to_unlink_.clear();
    return stats;
  }

  static std::vector<record::BatchView> Views(const std::vector<std::vector<uint8_t>>& batches) {
    std::vector<record::BatchView> out;
    for (const std::vector<uint8_t>& b : batches) {
      StatusOr<record::BatchView> v = record::BatchView::Parse(b);
      EXPECT_TRUE(v.ok());
      if (v.ok()) out.push_back(*v);
    }
    return out;
  }
  std::vector<std::vector<uint8_t>> AllBatches(bool read_committed = false,
                                               std::vector<AbortedTxn>* aborted = nullptr) {
    ReadResult r =
        log_->Read(log_->State().log_start_offset, 1 << 24, true, std::nullopt, read_committed);
    EXPECT_EQ(r.error, ErrorCode::kNone);
    if (aborted != nullptr) *aborted = r.aborted;
    return testing::ReadBatches(r);
  }

  // Each batch: "<base>:<key>=<value>,..." for data, "<base>:COMMIT" / "<base>:ABORT" for a
  // marker (with "+h" when it carries a delete horizon), "<base>-<last>:empty(<pid>)" for a
  // batch with no records.
  std::vector<std::string> Layout() {
    std::vector<std::string> out;
    std::vector<std::vector<uint8_t>> bytes = AllBatches();
    for (const record::BatchView& b : Views(bytes)) {
      EXPECT_TRUE(b.CrcValid());
      std::string s = std::to_string(b.base_offset()) + ":";
      if (b.record_count() == 0) {
        out.push_back(std::to_string(b.base_offset()) + "-" + std::to_string(b.last_offset()) +
                      ":empty(" + std::to_string(b.producer_id()) + ")");
        continue;
      }
      if (b.is_control()) {
        std::optional<record::EndTxnMarker> m;
        EXPECT_TRUE(record::ReadEndTxnMarker(b, &m).ok());
        s += (m && m->commit) ? "COMMIT" : "ABORT";
        if (b.has_delete_horizon()) s += "+h";
        out.push_back(s);
        continue;
      }
      std::string recs;
      Status st = record::ForEachRecord(b, [&](const record::Record& r) {
        if (!recs.empty()) recs += ",";
        recs += std::string(reinterpret_cast<const char*>(r.key->data()), r.key->size()) + "=" +
                std::string(reinterpret_cast<const char*>(r.value->data()), r.value->size());
        return true;
      });
      EXPECT_TRUE(st.ok()) << st;
      out.push_back(s + recs);
    }
    return out;
  }

  // What a consumer receives, "<offset>:<key>=<value>": read_uncommitted every data record;
  // read_committed those below the last stable offset not in an aborted transaction, by
  // the fetch's aborted-transaction list (the client's rule).
  std::vector<std::string> Consume(bool read_committed) {
    std::vector<AbortedTxn> aborted;
    std::vector<std::vector<uint8_t>> bytes = AllBatches(read_committed, &aborted);
    std::sort(aborted.begin(), aborted.end(), [](const AbortedTxn& a, const AbortedTxn& b) {
      return a.first_offset < b.first_offset;
    });
    size_t next = 0;
    std::set<int64_t> aborting;
    std::vector<std::string> out;
    for (const record::BatchView& b : Views(bytes)) {
      while (read_committed && next < aborted.size() &&
             aborted[next].first_offset <= b.last_offset()) {
        aborting.insert(aborted[next++].producer_id);
      }
      if (b.is_control()) {
        std::optional<record::EndTxnMarker> m;
        EXPECT_TRUE(record::ReadEndTxnMarker(b, &m).ok());
        if (m && !m->commit) aborting.erase(b.producer_id());
        continue;
      }
      if (read_committed && b.is_transactional() && aborting.count(b.producer_id()) > 0) continue;
      Status st = record::ForEachRecord(b, [&](const record::Record& r) {
        out.push_back(std::to_string(b.base_offset() + r.offset_delta) + ":" +
                      std::string(reinterpret_cast<const char*>(r.key->data()), r.key->size()) +
                      "=" +
                      std::string(reinterpret_cast<const char*>(r.value->data()), r.value->size()));
        return true;
      });
      EXPECT_TRUE(st.ok()) << st;
    }
    return out;
  }

  std::vector<AbortedTxn> IndexEntries() {
    std::vector<AbortedTxn> out;
    for (const std::shared_ptr<Segment>& s : log_->Segments()) {
      for (const AbortedTxn& t : s->AbortedTxns()) out.push_back(t);
    }
    return out;
  }
  std::vector<std::string> TxnIndexFiles() const {
    std::vector<std::string> out;
    for (const auto& f : fs::directory_iterator(LogDir())) {
      std::string name = f.path().filename().string();
      if (name.find(".txnindex") != std::string::npos) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  LogConfig config_;
  TempDir dir_{"cleanertxn"};
  FileCache files_{16};
  int64_t now_ = kT0;
  std::unique_ptr<Log> log_;
  std::vector<std::shared_ptr<Segment>> to_unlink_;
};

TEST_F(CleanerTxnTest, AnOpenTransactionIsNeitherCleanedNorMapped) {
  Data({{"k1", "a"}, {"k2", "b"}});  // 0..1
  Txn(kA, 0, {{"k1", "c"}});         // 2, open
  Data({{"k2", "d"}});               // 3
  RollNext();
  Data({{"z", "1"}});  // 4, active
  ASSERT_EQ(log_->LastStableOffset(), 2);
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  // Nothing in the segment holding the last stable offset is cleaned or mapped: k2=d does
  // not make k2=b go, nor does the open transaction's k1=c make k1=a go.
  EXPECT_EQ(stats->records_removed, 0);
  EXPECT_EQ(stats->end_offset, 0);
  EXPECT_EQ(stats->segments_cleaned, 0);
  EXPECT_EQ(Layout(), (std::vector<std::string>{"0:k1=a,k2=b", "2:k1=c", "3:k2=d", "4:z=1"}));

  Marker(kA, /*commit=*/true);  // 5
  RollNext();
  Data({{"z", "2"}});  // 6, active
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  // The committed record counts as any other: k1=a and k2=b go (z=2, in the active
  // segment, is not mapped).
  EXPECT_EQ(stats->records_removed, 2);
  EXPECT_EQ(Layout(), (std::vector<std::string>{"2:k1=c", "3:k2=d", "4:z=1", "5:COMMIT", "6:z=2"}));
  EXPECT_EQ(Consume(true), Consume(false));
  EXPECT_EQ(Consume(true), (std::vector<std::string>{"2:k1=c", "3:k2=d", "4:z=1", "6:z=2"}));
}

TEST_F(CleanerTxnTest, AbortedDataGoesThenItsIndexEntryThenItsMarkerAfterTheHorizon) {
  Data({{"k", "v1"}});                    // 0
  Txn(kA, 0, {{"k", "v2"}, {"j", "w"}});  // 1..2, aborted
  Marker(kA, /*commit=*/false);           // 3
  RollNext();
  Txn(kA, 2, {{"m", "1"}});     // 4, A's next transaction
  Marker(kA, /*commit=*/true);  // 5
  RollNext();
  Data({{"f", "1"}});  // 6, active
  ASSERT_EQ(IndexEntries(), (std::vector<AbortedTxn>{{kA, 1, 3, 4}}));
  const std::vector<std::string> committed_before = Consume(true);
  EXPECT_EQ(committed_before, (std::vector<std::string>{"0:k=v1", "4:m=1", "6:f=1"}));

  // Pass 1: the aborted batch goes (and its k=v2 did not make k=v1 go); the marker and the
  // index entry stay, since this pass met the transaction's data.
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->aborted_records_removed, 2);
  EXPECT_EQ(stats->records_removed, 2);
  EXPECT_EQ(Layout(),
            (std::vector<std::string>{"0:k=v1", "3:ABORT", "4:m=1", "5:COMMIT", "6:f=1"}));
  EXPECT_EQ(IndexEntries(), (std::vector<AbortedTxn>{{kA, 1, 3, 4}}));
  EXPECT_EQ(TxnIndexFiles(), (std::vector<std::string>{"00000000000000000000.txnindex"}));
  EXPECT_EQ(Consume(true), committed_before);
  EXPECT_EQ(Consume(false), committed_before);

  // Pass 2: no data of the aborted transaction left: the entry leaves the index and the
  // marker gets a delete horizon (now + delete.retention.ms in its base timestamp).
  now_ += 10;
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Layout(),
            (std::vector<std::string>{"0:k=v1", "3:ABORT+h", "4:m=1", "5:COMMIT", "6:f=1"}));
  std::vector<std::vector<uint8_t>> bytes = AllBatches();
  ASSERT_EQ(Views(bytes).size(), 5u);
  EXPECT_EQ(Views(bytes)[1].base_timestamp(), now_ + kRetention);
  EXPECT_TRUE(Views(bytes)[1].is_transactional());
  EXPECT_EQ(Views(bytes)[1].producer_id(), kA);
  EXPECT_TRUE(IndexEntries().empty());
  EXPECT_TRUE(TxnIndexFiles().empty());
  EXPECT_EQ(Consume(true), committed_before);

  // Before the horizon the marker stays; a restart keeps all of it.
  const int64_t horizon = now_ + kRetention;
  now_ = horizon - 1;
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->markers_removed, 0);
  ASSERT_TRUE(log_->Close().ok());
  log_ = Open(/*clean=*/true);
  ASSERT_NE(log_, nullptr);
  EXPECT_EQ(Layout(),
            (std::vector<std::string>{"0:k=v1", "3:ABORT+h", "4:m=1", "5:COMMIT", "6:f=1"}));
  EXPECT_TRUE(IndexEntries().empty());

  // At the horizon it goes. The COMMIT stays: its transaction's record (A's last) is there.
  now_ = horizon;
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->markers_removed, 1);
  EXPECT_EQ(Layout(), (std::vector<std::string>{"0:k=v1", "4:m=1", "5:COMMIT", "6:f=1"}));
  EXPECT_EQ(Consume(true), committed_before);
  EXPECT_EQ(Consume(false), committed_before);
}

TEST_F(CleanerTxnTest, ASwapCutShortLeavesNoIndexEntryTheCleanedCopyDropped) {
  Data({{"k", "v1"}});                    // 0
  Txn(kA, 0, {{"k", "v2"}, {"j", "w"}});  // 1..2, aborted
  Marker(kA, /*commit=*/false);           // 3
  RollNext();
  Txn(kA, 2, {{"m", "1"}});     // 4
  Marker(kA, /*commit=*/true);  // 5
  RollNext();
  Data({{"f", "1"}});  // 6, active
  ASSERT_TRUE(Clean().ok());
  ASSERT_EQ(IndexEntries(), (std::vector<AbortedTxn>{{kA, 1, 3, 4}}));
  ASSERT_TRUE(log_->Close().ok());
  const std::string crashed = dir_.path() + "/t-1";
  fs::copy(LogDir(), crashed);
  // The next pass drops the entry (its copy has no .txnindex); a crash right after the copy
  // was named .swap leaves the old segment, whose .txnindex holds the entry.
  log_ = Open(/*clean=*/true);
  ASSERT_NE(log_, nullptr);
  ASSERT_TRUE(Clean().ok());
  const std::vector<std::string> want = Layout();
  ASSERT_EQ(want, (std::vector<std::string>{"0:k=v1", "3:ABORT+h", "4:m=1", "5:COMMIT", "6:f=1"}));
  ASSERT_TRUE(log_->Close().ok());
  const std::string cleaned_log = LogDir() + "/00000000000000000000.log";
  fs::copy_file(cleaned_log, crashed + "/00000000000000000000.log.swap");
  fs::remove(crashed + "/.kafka_cleanshutdown");
  ASSERT_TRUE(fs::exists(crashed + "/00000000000000000000.txnindex"));
  log_ = Open(/*clean=*/false, crashed);
  ASSERT_NE(log_, nullptr);
  EXPECT_EQ(Layout(), want);
  EXPECT_TRUE(IndexEntries().empty());
  EXPECT_FALSE(fs::exists(crashed + "/00000000000000000000.txnindex"));
  EXPECT_EQ(Consume(true), (std::vector<std::string>{"0:k=v1", "4:m=1", "6:f=1"}));
}

TEST_F(CleanerTxnTest, ACommitMarkerGoesOnceItsRecordsWereCompactedAway) {
  Txn(kA, 0, {{"k", "a"}});     // 0
  Marker(kA, /*commit=*/true);  // 1
  Data({{"k", "b"}});           // 2
  RollNext();
  Txn(kA, 1, {{"x", "1"}});     // 3, A's last data, active
  Marker(kA, /*commit=*/true);  // 4
  // Pass 1: k=a goes (a later k); its marker stays, since the pass met its batch.
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1:COMMIT", "2:k=b", "3:x=1", "4:COMMIT"}));
  // Pass 2: horizon; pass 3, past it: gone.
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1:COMMIT+h", "2:k=b", "3:x=1", "4:COMMIT"}));
  now_ += kRetention;
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->markers_removed, 1);
  EXPECT_EQ(Layout(), (std::vector<std::string>{"2:k=b", "3:x=1", "4:COMMIT"}));
  EXPECT_EQ(Consume(true), (std::vector<std::string>{"2:k=b", "3:x=1"}));
}

TEST_F(CleanerTxnTest, AProducersLastBatchStaysAsAnEmptyBatchAndKeepsItsState) {
  Data({{"k", "a"}, {"j", "a"}}, kP, 0);  // 0..1, P's last batch (sequences 0..1)
  Data({{"k", "b"}, {"j", "b"}});         // 2..3
  RollNext();
  Data({{"f", "1"}});  // 4, active
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records_removed, 2);
  EXPECT_EQ(Layout(), (std::vector<std::string>{"0-1:empty(3000)", "2:k=b,j=b", "4:f=1"}));
  std::vector<std::vector<uint8_t>> bytes = AllBatches();
  const record::BatchView empty = Views(bytes)[0];
  EXPECT_EQ(empty.producer_epoch(), 0);
  EXPECT_EQ(empty.base_sequence(), 0);
  EXPECT_EQ(empty.max_timestamp(), now_);
  EXPECT_EQ(empty.size_in_bytes(), record::kBatchHeaderSize);
  // Another pass leaves it.
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Layout(), (std::vector<std::string>{"0-1:empty(3000)", "2:k=b,j=b", "4:f=1"}));

  // The producer state rebuilt from the log alone (no snapshot) knows P's last sequence, so
  // P's next batch is in order and a retry of the removed one is a duplicate.
  ASSERT_TRUE(log_->Close().ok());
  for (const auto& f : fs::directory_iterator(LogDir())) {
    if (f.path().extension() == ".snapshot") fs::remove(f.path());
  }
  log_ = Open(/*clean=*/false);
  ASSERT_NE(log_, nullptr);
  std::optional<ProducerEntry> p = log_->Producer(kP);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->last_seq(), 1);

  // Once P wrote a later batch, the empty one is not its last and goes.
  Data({{"q", "1"}}, kP, 2);  // 5
  RollNext();
  Data({{"f", "2"}});  // 6
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Layout(), (std::vector<std::string>{"2:k=b,j=b", "4:f=1", "5:q=1", "6:f=2"}));
}

TEST_F(CleanerTxnTest, AMarkerThatIsTheProducersLastStaysEmptyAfterItsHorizon) {
  // transaction.version 2: the marker bumps the epoch, so the producer keeps no data batch
  // and its marker of the new epoch is what stays.
  Txn(kA, 0, {{"k", "a"}});                                              // 0, aborted
  Marker(kA, /*commit=*/false, /*epoch=*/1, /*transaction_version=*/2);  // 1
  RollNext();
  Data({{"f", "1"}});  // 2, active
  ASSERT_TRUE(Clean().ok());
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1:ABORT", "2:f=1"}));
  ASSERT_TRUE(Clean().ok());
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1:ABORT+h", "2:f=1"}));
  now_ += kRetention;
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->markers_removed, 1);
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1-1:empty(1000)", "2:f=1"}));
  std::vector<std::vector<uint8_t>> bytes = AllBatches();
  EXPECT_TRUE(Views(bytes)[0].is_control());
  EXPECT_EQ(Views(bytes)[0].producer_epoch(), 1);
  EXPECT_TRUE(Consume(true) == Consume(false));
  EXPECT_EQ(Consume(true), (std::vector<std::string>{"2:f=1"}));
}

TEST_F(CleanerTxnTest, TwoProducersInterleavedKeepCommittedAndDropAborted) {
  Txn(kA, 0, {{"k", "a1"}});     // 0
  Txn(kB, 0, {{"k", "b1"}});     // 1
  Txn(kA, 1, {{"j", "a2"}});     // 2
  Marker(kB, /*commit=*/true);   // 3
  Marker(kA, /*commit=*/false);  // 4: A aborted
  RollNext();
  Data({{"f", "1"}});  // 5, active
  const std::vector<std::string> committed = Consume(true);
  EXPECT_EQ(committed, (std::vector<std::string>{"1:k=b1", "5:f=1"}));
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  // A's aborted k=a1 was not mapped: B's k=b1 is k's only live record. A's last batch (2) stays
  // emptied.
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1:k=b1", "2-2:empty(1000)", "3:COMMIT", "4:ABORT",
                                                "5:f=1"}));
  EXPECT_EQ(Consume(true), committed);
  EXPECT_EQ(Consume(false), committed);
  EXPECT_EQ(IndexEntries(), (std::vector<AbortedTxn>{{kA, 0, 4, 5}}));
}

TEST_F(CleanerTxnTest, ATransactionAcrossCleaningGroupsIsFollowedThroughThePass) {
  // Every batch in a segment, and a group, of its own: the data and the marker are cleaned
  // into different copies in one pass.
  config_.segment_bytes = 100;
  log_->SetConfig(config_);
  Txn(kA, 0, {{"k", "a"}});      // 0, aborted
  Marker(kA, /*commit=*/false);  // 1
  Txn(kA, 1, {{"m", "1"}});      // 2, A's last data
  Marker(kA, /*commit=*/true);   // 3
  Data({{"f", "1"}});            // 4, active
  ASSERT_EQ(log_->Segments().size(), 5u);
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->aborted_records_removed, 1);
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1:ABORT", "2:m=1", "3:COMMIT", "4:f=1"}));
  EXPECT_EQ(IndexEntries(), (std::vector<AbortedTxn>{{kA, 0, 1, 2}}));
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Layout(), (std::vector<std::string>{"1:ABORT+h", "2:m=1", "3:COMMIT", "4:f=1"}));
  EXPECT_TRUE(IndexEntries().empty());
  EXPECT_TRUE(TxnIndexFiles().empty());
  now_ += kRetention;
  stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Layout(), (std::vector<std::string>{"2:m=1", "3:COMMIT", "4:f=1"}));
  EXPECT_EQ(Consume(true), (std::vector<std::string>{"2:m=1", "4:f=1"}));
  EXPECT_EQ(Consume(false), Consume(true));
}

TEST_F(CleanerTxnTest, AnAbortWhoseMarkerIsPastTheCleanedRangeKeepsItsEntry) {
  Txn(kA, 0, {{"k", "a"}});  // 0: A's transaction
  RollNext();
  Data({{"y", "1"}});            // 1
  Txn(kB, 0, {{"x", "b"}});      // 2: B's, still open at the end
  Marker(kA, /*commit=*/false);  // 3
  RollNext();
  Data({{"f", "1"}});  // 4, active
  ASSERT_EQ(log_->LastStableOffset(), 2);
  StatusOr<CleanerStats> stats = Clean();
  ASSERT_TRUE(stats.ok()) << stats.status();
  // The cleaned range ends at the base of the segment holding B's transaction: A's aborted
  // batch (A's last: emptied) goes, that segment stays as it is, the index entry in it too.
  EXPECT_EQ(stats->end_offset, 1);
  EXPECT_EQ(Layout(),
            (std::vector<std::string>{"0-0:empty(1000)", "1:y=1", "2:x=b", "3:ABORT", "4:f=1"}));
  EXPECT_EQ(IndexEntries(), (std::vector<AbortedTxn>{{kA, 0, 3, 2}}));
  EXPECT_EQ(Consume(true), (std::vector<std::string>{"1:y=1"}));
  EXPECT_EQ(Consume(false), (std::vector<std::string>{"1:y=1", "2:x=b", "4:f=1"}));
  // The segment holding the open transaction's start waits whole, so it is not counted
  // dirty again after the pass (the cleaner thread would otherwise clean it without pause).
  CleanerOptions o;
  o.now_ms = [this] { return now_; };
  Cleaner cleaner(std::move(o));
  EXPECT_FALSE(cleaner.NeedsCleaning(*log_));
}

}  // namespace
}  // namespace runnel::storaged
