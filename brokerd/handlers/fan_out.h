// What ListOffsets, DeleteRecords, OffsetForLeaderEpoch and DescribeProducers share: the
// partitions that pass their checks go to storaged in one call, whose answer lists them in the
// call's order; the others are answered with their error where the checks left it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

// The request's state from the checks until storaged has answered, held by a shared_ptr
// that the call's completion keeps. `resp` has every partition in request order (those that
// failed a check carry their error); `slots` has one entry per partition of the storaged
// call, in the call's order. `Slot` is the handler's own struct; its `out` points at the
// partition's place in `resp` (which is not resized once slots point into it).
template <typename Resp, typename Slot>
struct StorageFanOut {
  std::unique_ptr<RequestContext> ctx;
  Respond respond;
  Resp resp;
  std::vector<Slot> slots;

  // Answers the request with `resp` as it stands; once.
  void Answer() { respond(EncodeResponse(*ctx, resp)); }
};

// The storaged call's `done` (it runs on the loop): fills each slot from the call's answer,
// then answers the request. A failed call gives every slot StorageCallError(status), a
// partition missing from the answer UNKNOWN_SERVER_ERROR; a partition result's error code
// goes to the client as it is, and `fill(slot, result)` copies the rest of a result whose
// error code is 0.
template <typename Resp, typename Slot, typename Fill>
auto FillThenAnswer(std::shared_ptr<StorageFanOut<Resp, Slot>> op, Fill fill) {
  return [op = std::move(op), fill = std::move(fill)](const grpc::Status& status, auto& result) {
    for (size_t i = 0; i < op->slots.size(); ++i) {
      const Slot& slot = op->slots[i];
      auto* out = slot.out;
      if (!status.ok() || i >= static_cast<size_t>(result.partitions_size())) {
        out->error_code =
            status.ok() ? protocol::ErrorCode::kUnknownServerError : StorageCallError(status);
        continue;
      }
      const auto& r = result.partitions(static_cast<int>(i));
      out->error_code = protocol::ErrorFromWire(r.error_code());
      if (r.error_code() != 0) continue;
      fill(slot, r);
    }
    op->Answer();
  };
}

}  // namespace runnel::brokerd
