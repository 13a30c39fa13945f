// Transaction markers: the control batches that end a producer's transaction in a partition
// (Kafka's WriteTxnMarkers, as the partition leader applies it). The transaction coordinator
// writes them after PrepareCommit/PrepareAbort; the WriteTxnMarkers API writes them for an
// operator aborting a hanging transaction (kafka-transactions.sh abort).
//
// A marker is one control batch in Kafka's format (common/record/control.h). It goes to
// storaged as a coordinator-origin append through the AppendBatcher (the
// produce path, so it lands after every batch of the transaction already sent there);
// storaged ends the producer's transaction in its state (producer_state.h) and refuses a
// marker of an older producer epoch (INVALID_PRODUCER_EPOCH) or coordinator epoch
// (TRANSACTION_COORDINATOR_FENCED).
//
// Observers hear of each stored marker, on the loop (the group coordinator makes a
// transaction's offsets visible or drops them).
//
// Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/protocol/error_code.h"

namespace runnel::brokerd {

struct BrokerContext;

struct TxnMarker {
  std::string topic;
  int32_t partition = 0;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  bool commit = false;
  int32_t coordinator_epoch = 0;
};

class TxnMarkerWriter {
 public:
  using Done = std::function<void(std::vector<protocol::ErrorCode>)>;

  explicit TxnMarkerWriter(BrokerContext& broker);
  virtual ~TxnMarkerWriter() = default;

  // Writes every marker; `done` runs on the loop, never inside this call, with one error per
  // marker in order: NONE once stored (acks=all), UNKNOWN_TOPIC_OR_PARTITION,
  // NOT_LEADER_OR_FOLLOWER (not led here, or storaged does not hold it), or storaged's answer.
  // Virtual for tests of the coordinator.
  virtual void Write(std::vector<TxnMarker> markers, Done done);

  void AddObserver(std::function<void(const TxnMarker&)> observer);

 protected:
  // Tells the observers of a stored marker.
  void Notify(const TxnMarker& marker);

 private:
  BrokerContext& broker_;
  std::vector<std::function<void(const TxnMarker&)>> observers_;
};

}  // namespace runnel::brokerd
