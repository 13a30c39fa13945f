// The shared memory regions of local brokerds (storage::SharedBytes): produce bytes that a
// brokerd placed in a memfd for storaged to append in place, with no copy through gRPC.
//
// A region is opened as /proc/<pid>/fd/<fd> and accepted only if it is a memfd (it answers
// F_GET_SEALS) with the inode the request names and is at least as big as the bytes named;
// anything else is refused, so a request cannot point storaged at another file. The few
// most recently used mappings are kept; one in use stays mapped until its user lets go.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>

#include "common/util/mutex.h"
#include "common/util/status.h"
#include "proto/runnel/storage.pb.h"

namespace runnel::storaged {

class SharedRegions {
 public:
  class Mapping;

  // The bytes `ref` names; `*hold` keeps them mapped. FAILED_PRECONDITION when the region
  // cannot be opened or is not an acceptable memfd, INVALID_ARGUMENT when the bytes are not
  // inside it.
  StatusOr<std::span<uint8_t>> Resolve(const storage::SharedBytes& ref,
                                       std::shared_ptr<Mapping>* hold);

  static constexpr size_t kKept = 4;

 private:
  StatusOr<std::shared_ptr<Mapping>> Open(const storage::SharedBytes& ref);

  Mutex mu_;
  std::deque<std::shared_ptr<Mapping>> recent_ ABSL_GUARDED_BY(mu_);  // most recently used first
};

}  // namespace runnel::storaged
