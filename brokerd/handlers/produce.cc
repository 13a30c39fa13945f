// Produce (key 0): v3-v13 served, advertised from v0 because librdkafka reads the advertised
// minimum; v0-v2 (message format v0/v1) are answered UNSUPPORTED_VERSION per partition, as
// Kafka 4 does. v13 names topics by id in the request and the answer (KIP-516): an id this
// broker does not know is UNKNOWN_TOPIC_ID; otherwise v13 is v12.
//
// brokerd checks what depends on the request (acks, topic, leadership, for acks=all an ISR of
// at least the topic's min.insync.replicas (else NOT_ENOUGH_REPLICAS, before appending, as
// Kafka), one v2 batch per partition, zstd only from v7) and hands the batch bytes unchanged to
// storaged, which validates them (CRC, records, sizes, timestamps), assigns offsets and appends.
// Appends from all connections are gathered into few storaged calls (AppendBatcher). acks=0 is
// never answered (a failed one closes the connection).
//
// Transactional batches, as Kafka: a request holding one without a transactional id is
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition. Before v12 a batch whose partition
// is not in its producer's ongoing transaction is refused before it is appended (KIP-890 part
// 1, when the id's coordinator is this broker): TRANSACTION_ABORTABLE (INVALID_TXN_STATE
// before v11), INVALID_PRODUCER_EPOCH for an old epoch, NOT_ENOUGH_REPLICAS (retriable)
// while the transaction is ending. So a late retry cannot land after its transaction's
// marker. From v12 (a transaction.version 2 client, KIP-890 part 2) the leader adds the
// partitions to the transaction itself before appending, as AddPartitionsToTxn would; the
// coordinator's errors map the same way, and one that is not reachable here (loading, or on
// another node) is NOT_ENOUGH_REPLICAS, which the client retries.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "brokerd/controller/topic_configs.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "brokerd/storage/append_batcher.h"
#include "brokerd/txn/txn_coordinator.h"
#include "common/record/batch.h"
#include "common/util/big_endian.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::ProduceRequest;
using protocol::ProduceResponse;

constexpr int16_t kMinServedVersion = 3;
constexpr int16_t kFirstZstdVersion = 7;
constexpr size_t kMagicOffset = 16;
constexpr size_t kAttributesOffset = 21;
constexpr size_t kProducerIdOffset = 43;
constexpr size_t kProducerEpochOffset = 51;
constexpr uint8_t kTransactionalBit = 0x10;
constexpr int16_t kFirstTransactionAbortableVersion = 11;
constexpr int16_t kFirstImplicitAddVersion = 12;
constexpr int16_t kFirstTopicIdVersion = 13;

bool IsTransactional(std::span<const uint8_t> batch) {
  return batch.size() >= record::kBatchHeaderSize &&
         (batch[kAttributesOffset + 1] & kTransactionalBit) != 0;
}

// KIP-890 part 1: the partition must be in the producer's ongoing transaction. Only a
// coordinator on this broker is asked; for one elsewhere (or loading) the batch is let
// through, as before verification existed.
ErrorCode VerifyTransactional(BrokerContext& broker, const std::string& transactional_id,
                              const std::string& topic, int32_t partition,
                              const txn::ProducerIdAndEpoch& producer, int16_t version) {
  txn::TxnCoordinator::Route route = broker.txns.RouteId(transactional_id);
  if (route.error != ErrorCode::kNone) return ErrorCode::kNone;
  return txn::VerificationError(route.shard->Verify(transactional_id, producer.producer_id,
                                                    producer.producer_epoch, {topic, partition}),
                                version >= kFirstTransactionAbortableVersion);
}

// What a v12+ batch is answered when adding its partition to the transaction failed:
// verification's mapping, and the coordinator moving or loading is retriable.
ErrorCode AddError(ErrorCode error) {
  switch (error) {
    case ErrorCode::kNotCoordinator:
    case ErrorCode::kCoordinatorLoadInProgress:
    case ErrorCode::kCoordinatorNotAvailable:
      return ErrorCode::kNotEnoughReplicas;
    default:
      return txn::VerificationError(error, /*abortable_known=*/true);
  }
}

txn::ProducerIdAndEpoch BatchProducer(std::span<const uint8_t> batch) {
  return {static_cast<int64_t>(LoadBigEndian64(batch.data() + kProducerIdOffset)),
          static_cast<int16_t>(LoadBigEndian16(batch.data() + kProducerEpochOffset))};
}

// Kafka's request-level rules for the records of one partition (v3+): exactly one batch,
// magic 2, zstd only from v7. Everything inside the batch is storaged's to check.
protocol::KafkaError CheckRecords(std::optional<std::span<const uint8_t>> records,
                                  int16_t version) {
  if (!records || records->empty()) {
    return {ErrorCode::kInvalidRecord,
            "Produce requests with version 3 and above must have exactly one record batch"};
  }
  const std::span<const uint8_t> bytes = *records;
  if (bytes.size() < record::kBatchHeaderSize) {
    return {ErrorCode::kCorruptMessage, "the record batch is shorter than its header"};
  }
  const uint64_t length = LoadBigEndian32(bytes.data() + 8);
  if (record::kLogOverhead + length < bytes.size()) {
    return {ErrorCode::kInvalidRecord,
            "Produce requests with version 3 and above must have exactly one record batch"};
  }
  if (static_cast<int8_t>(bytes[kMagicOffset]) != record::kMagicV2) {
    return {ErrorCode::kInvalidRecord,
            "Produce requests with version 3 and above must use record batch magic 2"};
  }
  const int codec = bytes[kAttributesOffset + 1] & 0x07;
  if (codec == static_cast<int>(record::Compression::kZstd) && version < kFirstZstdVersion) {
    return {ErrorCode::kUnsupportedCompressionType,
            "Produce requests with version below 7 cannot use zstd compression"};
  }
  return {};
}

// The response under construction, answered once every partition has its result.
struct Pending {
  std::unique_ptr<RequestContext> ctx;
  Respond respond;
  ProduceResponse resp;
  int outstanding = 0;
  bool answer = true;  // false for acks=0

  void Done() {
    if (--outstanding > 0) return;
    if (answer) {
      Response r = EncodeResponse(*ctx, resp);
      r.error = FirstError();
      return respond(std::move(r));
    }
    // acks=0 gets no answer; a failure closes the connection instead (Kafka's way of
    // telling such a producer to refresh its metadata).
    respond(FirstError() != ErrorCode::kNone ? Response::Close() : Response::None());
  }

  ErrorCode FirstError() const {
    for (const auto& t : resp.responses) {
      for (const auto& p : t.partition_responses) {
        if (p.error_code != ErrorCode::kNone) return p.error_code;
      }
    }
    return ErrorCode::kNone;
  }
};

// The topic's min.insync.replicas (at least 1), memoized until the metadata moves on.
int64_t MinInsyncReplicas(BrokerContext& broker, const TopicInfo& topic) {
  if (broker.min_isr_offset != broker.metadata.offset()) {
    broker.min_isr.clear();
    broker.min_isr_offset = broker.metadata.offset();
  }
  auto [it, inserted] = broker.min_isr.try_emplace(topic.name, 1);
  if (inserted) {
    const NodeConfigView node = NodeConfigView::Of(broker.config, broker.metadata, broker.node_id);
    it->second = std::max<int64_t>(
        1, std::strtoll(TopicConfigValue(node, topic, "min.insync.replicas").c_str(), nullptr, 10));
  }
  return it->second;
}

}  // namespace

void HandleProduce(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  // The batches stay in the frame until AppendBatcher copies them on their way to storaged,
  // or, when the frame was read into shared memory, names them there.
  ProduceRequest req;
  if (!DecodeRequest(*ctx, &req, /*borrow_records=*/true)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;

  auto pending = std::make_shared<Pending>();
  pending->answer = req.acks != 0;
  ProduceResponse& resp = pending->resp;
  // Every partition gets an entry now, in request order; appends fill theirs in later.
  struct Work {
    ProduceResponse::PartitionProduceResponse* out;
    storage::AppendPartition append;
    std::span<const uint8_t> records;  // in ctx's frame, which outlives the Append calls below
    std::optional<txn::ProducerIdAndEpoch> add_to_txn;  // v12+: added to the transaction first
    std::shared_ptr<TopicMetrics> metrics;              // the topic's, counted once appended
  };
  std::vector<Work> work;
  bool transactional_without_id = false;
  if (!req.transactional_id.has_value()) {
    for (const auto& topic : req.topic_data) {
      for (const auto& partition : topic.partition_data) {
        std::optional<std::span<const uint8_t>> records = partition.records.Contiguous();
        if (records && IsTransactional(*records)) transactional_without_id = true;
      }
    }
  }
  resp.responses.reserve(req.topic_data.size());
  const bool by_id = version >= kFirstTopicIdVersion;
  for (auto& topic : req.topic_data) {
    ProduceResponse::TopicProduceResponse& t = resp.responses.emplace_back();
    if (by_id) {
      t.topic_id = topic.topic_id;
    } else {
      t.name = topic.name;
    }
    t.partition_responses.reserve(topic.partition_data.size());
  }
  for (size_t ti = 0; ti < req.topic_data.size(); ++ti) {
    auto& topic = req.topic_data[ti];
    // From v13 a topic is named by its id (KIP-516); the name serves the checks below.
    const TopicInfo* info = by_id ? broker.metadata.FindTopicById(topic.topic_id)
                                  : broker.metadata.FindTopic(topic.name);
    if (by_id && info != nullptr) topic.name = info->name;
    for (auto& partition : topic.partition_data) {
      ProduceResponse::PartitionProduceResponse& out =
          resp.responses[ti].partition_responses.emplace_back();
      out.index = partition.index;
      out.base_offset = -1;
      auto fail = [&out, version](ErrorCode error, std::string message) {
        out.error_code = error;
        if (version >= 8 && !message.empty()) out.error_message = std::move(message);
      };
      if (version < kMinServedVersion) {
        fail(ErrorCode::kUnsupportedVersion, "Produce v0-v2 (message format v0/v1) is not served");
        continue;
      }
      if (transactional_without_id) {
        fail(ErrorCode::kTransactionalIdAuthorizationFailed,
             "a transactional batch needs the request's transactional id");
        continue;
      }
      if (by_id && info == nullptr) {
        fail(ErrorCode::kUnknownTopicId, "");
        continue;
      }
      if (req.acks != 0 && req.acks != 1 && req.acks != -1) {
        fail(ErrorCode::kInvalidRequiredAcks, "acks must be 0, 1 or -1");
        continue;
      }
      const PartitionInfo* p = nullptr;
      ErrorCode error = CheckLocalPartition(broker, info, partition.index, -1, &p);
      // Kafka refuses internal topics before looking at leadership.
      if (p != nullptr && info->internal()) {
        fail(ErrorCode::kInvalidTopicException,
             fmt::format("Cannot append to internal topic {}", topic.name));
        continue;
      }
      if (error != ErrorCode::kNone) {
        fail(error, "");
        if (error == ErrorCode::kNotLeaderOrFollower) {
          out.current_leader.leader_id = NodeId(p->leader);
          out.current_leader.leader_epoch = p->leader_epoch;
        }
        continue;
      }
      if (req.acks == -1) {
        // Kafka checks the ISR before appending: acks=all needs min.insync.replicas in sync.
        const int64_t min_isr = MinInsyncReplicas(broker, *info);
        if (static_cast<int64_t>(p->isr.size()) < min_isr) {
          fail(ErrorCode::kNotEnoughReplicas,
               fmt::format("The {} in-sync replicas of {}-{} are fewer than its "
                           "min.insync.replicas {}",
                           p->isr.size(), topic.name, partition.index, min_isr));
          continue;
        }
      }
      const std::optional<std::span<const uint8_t>> records = partition.records.Contiguous();
      protocol::KafkaError check = CheckRecords(records, version);
      if (!check.ok()) {
        fail(check.code, std::move(check.message));
        continue;
      }
      std::optional<txn::ProducerIdAndEpoch> add_to_txn;
      if (req.transactional_id.has_value() && IsTransactional(*records)) {
        if (version >= kFirstImplicitAddVersion) {
          add_to_txn = BatchProducer(*records);
        } else if (ErrorCode verified =
                       VerifyTransactional(broker, *req.transactional_id, topic.name,
                                           partition.index, BatchProducer(*records), version);
                   verified != ErrorCode::kNone) {
          fail(verified, fmt::format("{}-{} is not in an ongoing transaction of producer id and "
                                     "epoch of the batch",
                                     topic.name, partition.index));
          continue;
        }
      }
      storage::AppendPartition append;
      append.set_topic(topic.name);
      append.set_partition(partition.index);
      append.set_leader_epoch(p->leader_epoch);
      work.push_back(Work{&out, std::move(append), *records, add_to_txn, info->metrics});
    }
  }

  pending->ctx = std::move(ctx);
  pending->respond = std::move(respond);
  pending->outstanding = static_cast<int>(work.size()) + 1;
  const auto timeout = std::chrono::milliseconds(std::max(req.timeout_ms, 1000));
  auto append = [&broker, pending, version, timeout](Work& w) {
    auto* out = w.out;
    const uint64_t bytes = w.records.size();
    // The callback's captures were already past std::function's inline buffer: these two
    // add no allocation, only the shared pointer's atomic increment.
    broker.appends.Append(
        std::move(w.append), w.records, timeout,
        [pending, out, version, bytes, metrics = w.metrics](
            const grpc::Status& status, const storage::AppendPartitionResult& r) {
          if (!status.ok()) {
            out->error_code = StorageCallError(status);
            if (version >= 8) out->error_message = status.error_message();
          } else {
            out->error_code = protocol::ErrorFromWire(r.error_code());
            out->base_offset = r.base_offset();
            out->log_append_time_ms = r.log_append_time();
            out->log_start_offset = r.log_start_offset();
            if (r.error_code() == 0 && metrics != nullptr && r.last_offset() >= r.base_offset()) {
              metrics->bytes_in->Inc(bytes);
              metrics->records_in->Inc(
                  static_cast<uint64_t>(r.last_offset() - r.base_offset() + 1));
            }
            if (r.error_code() != 0 && version >= 8) {
              if (!r.error_message().empty()) out->error_message = r.error_message();
              if (r.batch_index() >= 0) {
                ProduceResponse::BatchIndexAndErrorMessage e;
                e.batch_index = r.batch_index();
                if (!r.error_message().empty()) e.batch_index_error_message = r.error_message();
                out->record_errors.push_back(std::move(e));
              }
            }
          }
          pending->Done();
        },
        pending->ctx->placed);
  };
  // v12+: the partitions go into their transaction first, one AddPartitions per producer.
  std::map<std::pair<int64_t, int16_t>, std::vector<Work>> adds;
  for (Work& w : work) {
    if (w.add_to_txn.has_value()) {
      adds[{w.add_to_txn->producer_id, w.add_to_txn->producer_epoch}].push_back(std::move(w));
    } else {
      append(w);
    }
  }
  for (auto& [producer, items] : adds) {
    auto group = std::make_shared<std::vector<Work>>(std::move(items));
    auto finish = [group, append, pending, version](ErrorCode error) {
      for (Work& w : *group) {
        if (error == ErrorCode::kNone) {
          append(w);
          continue;
        }
        w.out->error_code = error;
        if (version >= 8) {
          w.out->error_message =
              fmt::format("{}-{} could not be added to the producer's transaction",
                          w.append.topic(), w.append.partition());
        }
        pending->Done();
      }
    };
    txn::TxnCoordinator::Route route = broker.txns.RouteId(*req.transactional_id);
    if (route.error != ErrorCode::kNone) {
      finish(AddError(route.error));
      continue;
    }
    txn::TxnPartitions partitions;
    for (const Work& w : *group) partitions.emplace(w.append.topic(), w.append.partition());
    route.shard->AddPartitions(*req.transactional_id, producer.first, producer.second, partitions,
                               txn::kTransactionVersion2,
                               [finish](ErrorCode error) { finish(AddError(error)); });
  }
  pending->Done();
}

}  // namespace runnel::brokerd
