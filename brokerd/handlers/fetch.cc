// Fetch (key 1), v4-v18 for consumers: record batches as file ranges of storaged's segment
// files, written to the socket with sendfile (no record byte is copied through brokerd).
// v17 (a follower's directory id, KIP-853) and v18 (a follower's high watermark, KIP-1166)
// add fields only a replicating follower sets; with no replication they are read and unused.
//
// A fetch that finds less than min_bytes waits, without polling, for a change of one of its
// partitions (PartitionView, fed by storaged's watch stream and moved ahead by the answers
// to this brokerd's appends) or for max_wait_ms, then reads again. A partition whose fetch
// offset is its high watermark has nothing to read, and is answered from PartitionView
// without calling storaged, so an idle long poll costs nothing until data arrives.
//
// Fetch sessions (KIP-227, brokerd/fetch_sessions.h): a full fetch of epoch 0 makes a session
// of its partitions; an incremental one (epoch 1, 2, ...) reads every partition of its
// session, with the positions the consumer last sent for each, and answers only those with
// something new. Epoch -1, and versions before 7, fetch without a session.
//
// An answer carries at most the node's fetch.max.bytes of records, whatever more the
// request's max_bytes allows (Kafka's broker key; Runnel's default is smaller, see keys.cc).
//
// READ_COMMITTED (isolation level 1): a partition's records end at its last stable offset
// (the first offset of its earliest ongoing transaction), and the answer lists the aborted
// transactions overlapping them (storaged's transaction indexes), so the consumer drops
// their records. Such reads always go to storaged (the tail of appends knows no
// transactions); a fetch at the last stable offset waits for it to move (a marker's append
// answer moves it at once). Every answer carries the partition's last stable offset; only
// READ_UNCOMMITTED answers have null aborted_transactions, as in Kafka.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>

#include "brokerd/fetch_sessions.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "brokerd/net/uv_handle.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::FetchRequest;
using protocol::FetchResponse;

constexpr int16_t kFirstTopicIdVersion = 13;
// Session epochs (KIP-227): 0 starts a session, -1 fetches without one (or closes one).
constexpr int32_t kInitialEpoch = 0;
constexpr int32_t kFinalEpoch = -1;
constexpr std::chrono::milliseconds kReadTimeout{30000};

// Opens the segment file at `path` and checks it is still the file with `inode`, the one
// storaged named (see FileRange); null when it is gone or replaced.
std::shared_ptr<const protocol::FileHandle> OpenFile(const std::string& path, uint64_t inode) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  auto file = std::make_shared<const protocol::FileHandle>(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != inode) return nullptr;
  return file;
}

struct FetchOp : std::enable_shared_from_this<FetchOp> {
  struct Part {
    std::string topic;  // as the consumer named it, and as the answer names it
    protocol::Uuid topic_id{};
    std::string name;  // as storaged knows it (the name a topic id resolves to)
    FetchRequest::FetchPartition in;
    ErrorCode error = ErrorCode::kNone;  // found before reading: answered as is
    int32_t leader = -1;
    int32_t leader_epoch = -1;
    // Filled by the latest attempt.
    FetchResponse::PartitionData out;
    std::shared_ptr<TopicMetrics> metrics;  // the topic's, for the bytes sent
  };

  BrokerContext& broker;
  std::unique_ptr<RequestContext> ctx;
  Respond respond;
  int16_t version = 0;
  int32_t max_wait_ms = 0;
  int32_t min_bytes = 0;
  int32_t max_bytes = 0;
  bool read_committed = false;
  FetchResponse resp;
  std::vector<Part> parts;
  // The session an incremental fetch reads; its answer holds only what changed.
  std::shared_ptr<FetchSession> session;
  // A full fetch of epoch 0: its answer makes a session of its partitions.
  bool create_session = false;

  // Where the fetch stands:
  //   kAttempting  reading what PartitionView and the tails hold, on the loop; from here it
  //                answers (kDone), calls storaged (kReading) or waits (kWaiting);
  //   kReading     a storaged Read in flight; its answer decides as an attempt does;
  //   kWaiting     a watch on its partitions is set; a change or the deadline attempts again;
  //   kDone        answered (also when the broker stops); every event after it is ignored.
  // The deadline (max_wait_ms) passing is an event, not a state: after it no attempt waits.
  enum class State { kAttempting, kReading, kWaiting, kDone };
  State state = State::kAttempting;
  bool deadline_passed = false;
  PartitionView::WatchId watch = 0;  // set only in kWaiting
  UvTimer deadline;                  // started only for a fetch that may wait
  uint64_t cancel_id = 0;            // its broker.cancel_on_stop entry, 0 for none

  FetchOp(BrokerContext& b, std::unique_ptr<RequestContext> c, Respond r)
      : broker(b), ctx(std::move(c)), respond(std::move(r)) {}

  // A fetch that may wait is owned by its cancel_on_stop entry until it finishes (a broker
  // stopping answers it now); its deadline timer holds a weak reference, the partition watch
  // and the read in flight strong ones.
  void Start() {
    if (max_wait_ms > 0 && min_bytes > 0) {
      cancel_id = broker.next_cancel_id++;
      broker.cancel_on_stop.emplace(cancel_id, [op = shared_from_this()] { op->Finish(); });
      deadline.Init(broker.loop.raw());
      std::weak_ptr<FetchOp> weak = shared_from_this();
      deadline.Start(static_cast<uint64_t>(max_wait_ms), 0, [weak] {
        if (auto op = weak.lock()) {
          op->deadline_passed = true;
          op->Wake();
        }
      });
    }
    Attempt();
  }

  // A watched partition changed or the deadline passed: a waiting fetch attempts again; a
  // read in flight decides when it returns (after the deadline, it answers).
  void Wake() {
    if (state != State::kWaiting) return;
    if (watch != 0) broker.partitions.Unwatch(watch);
    watch = 0;
    Attempt();
  }

  bool MayWait() const { return max_wait_ms > 0 && min_bytes > 0 && !deadline_passed; }
  // Whether a read that found `bytes` is answered now rather than waited on.
  bool AnswerNow(int64_t bytes, bool any_error) const {
    return any_error || bytes >= min_bytes || !MayWait();
  }

  void Attempt() {
    if (state == State::kDone || state == State::kReading) return;
    state = State::kAttempting;
    bool any_error = false;
    storage::ReadRequest read;
    std::vector<size_t> reading_parts;
    for (size_t i = 0; i < parts.size(); ++i) {
      Part& p = parts[i];
      p.out = FetchResponse::PartitionData();
      p.out.partition_index = p.in.partition;
      p.out.high_watermark = -1;
      p.out.last_stable_offset = -1;
      p.out.log_start_offset = -1;
      if (!read_committed) p.out.aborted_transactions.reset();
      p.out.records.data.emplace();
      ErrorCode error = p.error;
      const StoredPartition* st = nullptr;
      if (error == ErrorCode::kNone) {
        st = broker.partitions.Find(p.name, p.in.partition);
        if (st == nullptr) error = ErrorCode::kNotLeaderOrFollower;
      }
      if (error != ErrorCode::kNone) {
        p.out.error_code = error;
        if (error == ErrorCode::kNotLeaderOrFollower || error == ErrorCode::kFencedLeaderEpoch) {
          p.out.current_leader.leader_id = NodeId(p.leader);
          p.out.current_leader.leader_epoch = p.leader_epoch;
        }
        any_error = true;
        continue;
      }
      p.out.high_watermark = st->high_watermark;
      p.out.last_stable_offset = st->last_stable_offset;
      p.out.log_start_offset = st->log_start_offset;
      const int64_t readable = read_committed ? st->last_stable_offset : st->high_watermark;
      if (p.in.fetch_offset == readable && p.in.fetch_offset >= st->log_start_offset) {
        continue;  // nothing to read yet
      }
      storage::ReadPartition* r = read.add_partitions();
      r->set_topic(p.name);
      r->set_partition(p.in.partition);
      r->set_offset(p.in.fetch_offset);
      r->set_max_bytes(std::max(p.in.partition_max_bytes, 0));
      r->set_min_one_batch(true);
      if (read_committed) r->set_read_committed(true);
      reading_parts.push_back(i);
    }
    if (reading_parts.empty()) {
      if (any_error || !MayWait()) return Finish();
      return Wait();
    }
    if (!read_committed && AnswerFromTail(reading_parts, any_error)) return;
    read.set_max_total_bytes(std::max(max_bytes, 1));
    state = State::kReading;
    auto self = shared_from_this();
    broker.storage.Read(std::move(read), kReadTimeout,
                        [self, reading_parts = std::move(reading_parts), any_error](
                            const grpc::Status& status, storage::ReadResponse& result) {
                          self->OnRead(status, result, reading_parts, any_error);
                        });
  }

  // Answers the reads from the partitions' tails (PartitionView::ReadTail) when every one
  // of them can be, spending max_bytes over the partitions in order as storaged's Read does:
  // a consumer keeping up costs no storaged call. False, with nothing changed, when one
  // cannot be; a tail whose file is gone is dropped.
  bool AnswerFromTail(const std::vector<size_t>& reading_parts, bool any_error) {
    const int64_t budget = std::max(max_bytes, 1);
    int64_t used = 0;
    std::vector<std::vector<protocol::FileSlice>> found;
    found.reserve(reading_parts.size());
    // Each file is opened per answer, as the ranges of a Read are, so brokerd holds no
    // descriptor between fetches and a file replaced meanwhile is noticed.
    std::vector<std::pair<const TailSegment*, std::shared_ptr<const protocol::FileHandle>>> open;
    for (size_t i : reading_parts) {
      const Part& p = parts[i];
      const int64_t limit = std::min<int64_t>(std::max(p.in.partition_max_bytes, 0),
                                              std::max<int64_t>(0, budget - used));
      std::optional<std::vector<TailSlice>> slices = broker.partitions.ReadTail(
          p.name, p.in.partition, p.in.fetch_offset, limit, /*min_one=*/used == 0);
      if (!slices) return false;
      std::vector<protocol::FileSlice>& files = found.emplace_back();
      for (const TailSlice& slice : *slices) {
        std::shared_ptr<const protocol::FileHandle> file;
        for (const auto& [segment, handle] : open) {
          if (segment == slice.segment.get()) file = handle;
        }
        if (file == nullptr) {
          file = OpenFile(slice.segment->path, slice.segment->inode);
          if (file != nullptr) open.emplace_back(slice.segment.get(), file);
        }
        if (file == nullptr) {
          broker.partitions.DropTail(p.name, p.in.partition);
          return false;
        }
        files.push_back(protocol::FileSlice{std::move(file), slice.position, slice.length});
        used += slice.length;
      }
    }
    for (size_t k = 0; k < reading_parts.size(); ++k) {
      parts[reading_parts[k]].out.records.files = std::move(found[k]);
    }
    if (AnswerNow(used, any_error)) {
      Finish();
    } else {
      Wait();
    }
    return true;
  }

  void OnRead(const grpc::Status& status, const storage::ReadResponse& result,
              const std::vector<size_t>& reading_parts, bool any_error) {
    if (state != State::kReading) return;  // answered meanwhile (the broker stopping)
    state = State::kAttempting;
    int64_t total = 0;
    bool stale = false;
    for (size_t k = 0; k < reading_parts.size(); ++k) {
      Part& p = parts[reading_parts[k]];
      if (!status.ok() || k >= static_cast<size_t>(result.partitions_size())) {
        p.out.error_code = status.ok() ? ErrorCode::kUnknownServerError : StorageCallError(status);
        any_error = true;
        continue;
      }
      const storage::ReadPartitionResult& r = result.partitions(static_cast<int>(k));
      if (r.error_code() != 0) {
        p.out.error_code = protocol::ErrorFromWire(r.error_code());
        p.out.high_watermark = -1;
        p.out.last_stable_offset = -1;
        p.out.log_start_offset = -1;
        any_error = true;
        continue;
      }
      p.out.high_watermark = r.high_watermark();
      p.out.last_stable_offset = r.last_stable_offset();
      p.out.log_start_offset = r.log_start_offset();
      if (read_committed) {
        p.out.aborted_transactions->reserve(r.aborted_transactions_size());
        for (const storage::AbortedTransaction& a : r.aborted_transactions()) {
          p.out.aborted_transactions->push_back(
              {.producer_id = ProducerId(a.producer_id()), .first_offset = a.first_offset()});
        }
      }
      for (const storage::FileRange& range : r.ranges()) {
        auto file = OpenFile(range.path(), range.inode());
        // Gone or replaced since storaged answered: send what came before (whole batches);
        // the client fetches the rest again.
        if (file == nullptr) break;
        p.out.records.files.push_back(
            protocol::FileSlice{std::move(file), range.position(), range.length()});
        total += range.length();
      }
      const StoredPartition* st = broker.partitions.Find(p.name, p.in.partition);
      if (st != nullptr && (read_committed ? st->last_stable_offset > r.last_stable_offset()
                                           : st->high_watermark > r.high_watermark())) {
        stale = true;
      }
    }
    if (AnswerNow(total, any_error)) return Finish();
    // Data arrived between the read and now: read again rather than wait for the next change.
    if (stale) return Attempt();
    Wait();
  }

  void Wait() {
    std::vector<PartitionKey> keys;
    keys.reserve(parts.size());
    for (const Part& p : parts) keys.emplace_back(p.name, p.in.partition);
    auto self = shared_from_this();
    state = State::kWaiting;
    watch = broker.partitions.Watch(keys, [self] {
      self->watch = 0;  // a watch runs once
      self->Wake();
    });
  }

  void Finish() {
    if (state == State::kDone) return;
    state = State::kDone;
    auto self = shared_from_this();  // the cancel_on_stop entry may hold the last reference
    if (cancel_id != 0) broker.cancel_on_stop.erase(cancel_id);
    if (watch != 0) broker.partitions.Unwatch(watch);
    watch = 0;
    deadline.Close();
    std::vector<FetchSession::Partition> created;
    if (create_session) created.reserve(parts.size());
    ErrorCode first_error = ErrorCode::kNone;
    for (Part& p : parts) {
      if (p.metrics != nullptr) {
        p.metrics->bytes_out->Inc(p.out.records.SizeInBytes());
      }
      if (first_error == ErrorCode::kNone) first_error = p.out.error_code;
      if (session != nullptr && !session->Answered(p.topic, p.topic_id, p.out)) continue;
      if (create_session) {
        const bool ok = p.out.error_code == ErrorCode::kNone;
        created.push_back(FetchSession::Partition{
            .topic = p.topic,
            .topic_id = p.topic_id,
            .in = p.in,
            .high_watermark = ok ? p.out.high_watermark : -1,
            .log_start_offset = p.out.log_start_offset,
            .last_stable_offset = p.out.last_stable_offset,
        });
      }
      // Consecutive partitions of one topic share its entry, as in Kafka's answers.
      if (resp.responses.empty() || resp.responses.back().topic != p.topic ||
          resp.responses.back().topic_id != p.topic_id) {
        FetchResponse::FetchableTopicResponse& t = resp.responses.emplace_back();
        t.topic = p.topic;
        t.topic_id = p.topic_id;
      }
      resp.responses.back().partitions.push_back(std::move(p.out));
    }
    if (create_session) {
      std::shared_ptr<FetchSession> made = broker.fetch_sessions.Create(
          std::move(created), version >= kFirstTopicIdVersion, std::chrono::steady_clock::now());
      resp.session_id = made != nullptr ? made->id() : 0;
    }
    Response r = EncodeResponse(*ctx, resp);
    if (r.error == ErrorCode::kNone) r.error = first_error;
    respond(std::move(r));
  }

  // Adds a partition to read: `topic` and `topic_id` as the consumer named them, `in` its
  // position and limits.
  void AddPart(const std::string& topic, const protocol::Uuid& topic_id,
               const FetchRequest::FetchPartition& in) {
    const TopicInfo* info = nullptr;
    ErrorCode error = ErrorCode::kNone;
    if (version >= kFirstTopicIdVersion) {
      info = broker.metadata.FindTopicById(topic_id);
      if (info == nullptr) error = ErrorCode::kUnknownTopicId;
    } else {
      info = broker.metadata.FindTopic(topic);
      if (info == nullptr) error = ErrorCode::kUnknownTopicOrPartition;
    }
    Part& part = parts.emplace_back();
    part.topic = topic;
    part.topic_id = topic_id;
    part.name = info != nullptr ? info->name : topic;
    part.in = in;
    part.error = error;
    if (info == nullptr) return;
    part.metrics = info->metrics;
    const PartitionInfo* p = nullptr;
    part.error = CheckLocalPartition(broker, info, in.partition, in.current_leader_epoch, &p);
    if (p == nullptr && version >= kFirstTopicIdVersion) part.error = ErrorCode::kUnknownTopicId;
    if (p != nullptr) {
      part.leader = p->leader;
      part.leader_epoch = p->leader_epoch;
    }
    // storaged may hold the log a moment after the metadata shows the partition: that is
    // answered when the fetch is attempted, from PartitionView.
    if (part.error == ErrorCode::kNotLeaderOrFollower && p != nullptr &&
        p->leader == broker.node_id) {
      part.error = ErrorCode::kNone;
    }
  }
};

}  // namespace

void HandleFetch(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  FetchRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;
  auto op = std::make_shared<FetchOp>(broker, std::move(ctx), std::move(respond));
  op->version = version;

  op->max_wait_ms = req.max_wait_ms;
  op->min_bytes = req.min_bytes;
  // The node's fetch.max.bytes bounds what any one consumer asks for, as in Kafka.
  op->max_bytes = std::min(req.max_bytes, broker.fetch_max_bytes);
  op->read_committed = req.isolation_level == 1;

  // Without a session, or making one: the request names every partition, in order. A full
  // fetch naming a session ends it (the consumer starts afresh).
  FetchSessionCache& sessions = broker.fetch_sessions;
  if (req.session_epoch == kInitialEpoch || req.session_epoch == kFinalEpoch) {
    if (req.session_id != 0) sessions.Remove(req.session_id);
    op->create_session = req.session_epoch == kInitialEpoch;
    for (const FetchRequest::FetchTopic& topic : req.topics) {
      for (const FetchRequest::FetchPartition& partition : topic.partitions) {
        op->AddPart(topic.topic, topic.topic_id, partition);
      }
    }
    return op->Start();
  }

  // Incremental: the session's partitions, with what this request changes.
  std::shared_ptr<FetchSession> session =
      sessions.Find(req.session_id, std::chrono::steady_clock::now());
  ErrorCode error = ErrorCode::kNone;
  if (session == nullptr) {
    error = ErrorCode::kFetchSessionIdNotFound;
  } else if (session->epoch() != req.session_epoch) {
    error = ErrorCode::kInvalidFetchSessionEpoch;
  } else if (session->uses_topic_ids() != (version >= kFirstTopicIdVersion)) {
    error = ErrorCode::kFetchSessionTopicIdError;
  }
  if (error != ErrorCode::kNone) {
    op->resp.error_code = error;
    op->state = FetchOp::State::kDone;
    return op->respond(EncodeResponse(*op->ctx, op->resp));
  }
  session->ApplyIncremental(req);
  op->resp.session_id = session->id();
  op->parts.reserve(session->size());
  for (const FetchSession::Partition& p : session->partitions()) {
    op->AddPart(p.topic, p.topic_id, p.in);
  }
  op->session = std::move(session);
  op->Start();
}

}  // namespace runnel::brokerd
