#include "brokerd/txn/marker_writer.h"

#include <memory>

#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "common/log/log.h"
#include "common/record/control.h"

namespace runnel::brokerd {

using protocol::ErrorCode;

namespace {

const log::ModuleLogger kLog("brokerd.txn");

// Kafka's request.timeout.ms default, the longest a marker's append may take.
constexpr std::chrono::milliseconds kAppendTimeout{30000};

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TxnMarkerWriter::TxnMarkerWriter(BrokerContext& broker) : broker_(broker) {}

void TxnMarkerWriter::AddObserver(std::function<void(const TxnMarker&)> observer) {
  observers_.push_back(std::move(observer));
}

void TxnMarkerWriter::Notify(const TxnMarker& marker) {
  for (const auto& observer : observers_) observer(marker);
}

void TxnMarkerWriter::Write(std::vector<TxnMarker> markers, Done done) {
  struct State {
    std::vector<TxnMarker> markers;
    std::vector<ErrorCode> errors;
    size_t left = 0;
    Done done;
  };
  auto state = std::make_shared<State>();
  state->markers = std::move(markers);
  state->errors.assign(state->markers.size(), ErrorCode::kNone);
  state->left = state->markers.size();
  state->done = std::move(done);
  auto finish_one = [this, state](size_t i, ErrorCode error) {
    state->errors[i] = error;
    if (error == ErrorCode::kNone) Notify(state->markers[i]);
    if (--state->left == 0) state->done(std::move(state->errors));
  };
  if (state->markers.empty()) {
    broker_.loop.Post([state] { state->done({}); });
    return;
  }
  const int64_t now = WallMs();
  for (size_t i = 0; i < state->markers.size(); ++i) {
    const TxnMarker& m = state->markers[i];
    const PartitionInfo* partition = nullptr;
    const ErrorCode check =
        CheckLocalPartition(broker_, broker_.metadata.FindTopic(m.topic), m.partition,
                            /*current_leader_epoch=*/-1, &partition);
    if (check != ErrorCode::kNone) {
      broker_.loop.Post([finish_one, i, check] { finish_one(i, check); });
      continue;
    }
    const std::vector<uint8_t> batch = record::BuildEndTxnMarkerBatch(
        m.producer_id, m.producer_epoch, {m.commit, m.coordinator_epoch}, now);
    storage::AppendPartition append;
    append.set_topic(m.topic);
    append.set_partition(m.partition);
    append.set_leader_epoch(partition->leader_epoch);
    append.set_coordinator_origin(true);
    broker_.appends.Append(
        std::move(append), batch, kAppendTimeout,
        [finish_one, i, topic = m.topic, p = m.partition](const grpc::Status& status,
                                                          const storage::AppendPartitionResult& r) {
          const ErrorCode error =
              status.ok() ? protocol::ErrorFromWire(r.error_code()) : StorageCallError(status);
          if (error != ErrorCode::kNone) {
            kLog()->debug("marker for {}-{} failed: {} {}", topic, p, protocol::ErrorName(error),
                          status.ok() ? r.error_message() : status.error_message());
          }
          finish_one(i, error);
        });
  }
}

}  // namespace runnel::brokerd
