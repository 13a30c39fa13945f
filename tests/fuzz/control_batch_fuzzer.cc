// libFuzzer target: control batches (the COMMIT/ABORT markers of transactions) and the
// other batches of a coordinator's appends, as storaged reads them. The input is a records
// payload (batches back to back, as record_batch_fuzzer's). Each batch gets its CRC
// recomputed (record_batch_fuzzer covers bad CRCs; here mutations should reach the records)
// and the next offsets, as the log gives them; a batch the log would take (it passes
// ValidateBatch for a non-client append) then goes through:
//   - record::ReadEndTxnMarker answers OK, INVALID_RECORD or CORRUPT_MESSAGE only, and a
//     marker it reads, rebuilt with BuildEndTxnMarkerBatch, validates and reads back equal;
//   - a batch with a producer id (the log keeps no state for the others) goes through the
//     append path (CheckCoordinatorBatch, then Commit when accepted, with transaction.version
//     1 and 2 in turn) and, when accepted, through the replay path (ReplayBatch with the
//     marker as the log reads it) of a second producer state: both must end the same
//     transaction and hold the same producers and last stable offset after every batch, as
//     a restart rebuilds what an append built. A control batch whose marker cannot be read
//     is never accepted; a rejected batch gets only the errors a coordinator's append can.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "common/record/batch.h"
#include "common/record/control.h"
#include "common/util/crc32c.h"
#include "storaged/log/producer_state.h"

namespace runnel::storaged {
namespace {

using protocol::ErrorCode;

constexpr size_t kMaxDecompressed = 1 << 20;
constexpr size_t kCrcAt = 17;   // the batch's CRC field
constexpr size_t kCrcEnd = 21;  // where the bytes it covers start

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

// The marker as ReadEndTxnMarker gives it; checks its error codes and the rebuild.
std::optional<record::EndTxnMarker> CheckMarker(const record::BatchView& batch, bool* readable) {
  std::optional<record::EndTxnMarker> marker;
  const protocol::KafkaError e = record::ReadEndTxnMarker(batch, &marker);
  *readable = e.ok();
  if (!e.ok()) {
    if (e.code != ErrorCode::kInvalidRecord && e.code != ErrorCode::kCorruptMessage) {
      Fail("ReadEndTxnMarker: an unexpected error code");
    }
    if (marker) Fail("ReadEndTxnMarker: a marker with an error");
    return std::nullopt;
  }
  if (!marker) return std::nullopt;
  const std::vector<uint8_t> rebuilt = record::BuildEndTxnMarkerBatch(
      batch.producer_id(), batch.producer_epoch(), *marker, batch.max_timestamp());
  if (!record::ValidateBatch(rebuilt, record::ValidationOptions{.from_client = false}).ok()) {
    Fail("a rebuilt marker batch does not validate");
  }
  StatusOr<record::BatchView> view = record::BatchView::Parse(rebuilt);
  if (!view.ok()) Fail("a rebuilt marker batch does not parse");
  std::optional<record::EndTxnMarker> again;
  if (!record::ReadEndTxnMarker(*view, &again).ok() || !again || again->commit != marker->commit ||
      again->coordinator_epoch != marker->coordinator_epoch) {
    Fail("a rebuilt marker reads back different");
  }
  if (view->producer_id() != batch.producer_id() ||
      view->producer_epoch() != batch.producer_epoch() || !view->is_control() ||
      !view->is_transactional()) {
    Fail("a rebuilt marker batch has another header");
  }
  return marker;
}

// The append path (`appended`) and the replay path (`replayed`) side by side.
struct Paths {
  int transaction_version;
  ProducerStateManager appended;
  ProducerStateManager replayed;

  // `marker`: the batch's marker when it is a control batch (`readable`: its records read).
  void Take(const record::BatchView& batch, const std::optional<record::EndTxnMarker>& marker,
            bool readable) {
    ProducerStateManager::AppendPlan plan;
    const protocol::KafkaError e =
        appended.CheckCoordinatorBatch(batch, batch.base_offset(), transaction_version, &plan);
    if (!e.ok()) {
      switch (e.code) {
        case ErrorCode::kInvalidProducerEpoch:
        case ErrorCode::kTransactionCoordinatorFenced:
        case ErrorCode::kInvalidTxnState:
        case ErrorCode::kInvalidRecord:
        case ErrorCode::kCorruptMessage:
          return;
        default:
          Fail("CheckCoordinatorBatch: an unexpected error code");
      }
    }
    if (!readable) Fail("a control batch whose marker cannot be read was appended");
    const std::vector<CompletedTxn> completed = plan.completed();
    appended.Commit(std::move(plan));
    const std::optional<CompletedTxn> done =
        replayed.ReplayBatch(ProducerBatchHeader::Of(batch), marker);
    if (completed.size() > 1) Fail("one batch ended more than one transaction");
    if (done.has_value() != !completed.empty() || (done && !(*done == completed[0]))) {
      Fail("append and replay end different transactions");
    }
    if (appended.producers() != replayed.producers()) {
      Fail("append and replay keep different producers");
    }
    if (appended.FirstUnstableOffset() != replayed.FirstUnstableOffset()) {
      Fail("append and replay give different last stable offsets");
    }
    if (batch.is_control() && marker) {
      const ProducerEntry* entry = appended.Find(batch.producer_id());
      if (entry == nullptr || entry->txn_first_offset != -1 ||
          entry->coordinator_epoch != marker->coordinator_epoch) {
        Fail("an accepted marker left its producer's transaction open");
      }
    }
  }
};

}  // namespace
}  // namespace runnel::storaged

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runnel::storaged;
  using namespace runnel::record;
  runnel::StatusOr<std::vector<BatchView>> split = SplitBatches(ByteSpan(data, size));
  if (!split.ok()) return 0;
  Paths paths[2] = {{.transaction_version = 1}, {.transaction_version = 2}};
  int64_t next_offset = 0;
  std::vector<uint8_t> bytes;
  for (const BatchView& original : *split) {
    bytes.assign(original.bytes().begin(), original.bytes().end());
    const uint32_t crc = runnel::crc32c::Value(bytes.data() + kCrcEnd, bytes.size() - kCrcEnd);
    for (int i = 0; i < 4; ++i) bytes[kCrcAt + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
    // The log's offsets (outside the CRC), so that offsets stay where a log has them.
    SetBaseOffset(bytes, next_offset);
    const ValidationOptions options{.from_client = false,
                                    .max_decompressed_bytes = kMaxDecompressed};
    if (!ValidateBatch(bytes, options).ok()) continue;
    runnel::StatusOr<BatchView> batch = BatchView::Parse(bytes);
    if (!batch.ok()) Fail("a batch that validates does not parse");
    next_offset = batch->last_offset() + 1;

    std::optional<EndTxnMarker> marker;
    bool readable = true;
    if (batch->is_control()) marker = CheckMarker(*batch, &readable);
    if (batch->producer_id() < 0) continue;
    for (Paths& p : paths) p.Take(*batch, marker, readable);
  }
  return 0;
}
