// A Kafka request as a handler sees it, and the answer it gives.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/protocol/header.h"
#include "common/protocol/wire.h"

namespace runnel::brokerd {

// std::allocator, except that a value-initialised element (what resize() makes) is left
// uninitialised: for buffers whose every byte is written next, as a frame read from the
// socket is (zeroing a produce request of a few MiB first costs a pass over its memory).
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {  // NOLINT(readability-identifier-naming): the allocator interface's name
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}

  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using FrameBytes = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

// Memory outside the server that a large frame is read into, so that its bytes need not be
// copied again on their way on (a produce request's records into the memory brokerd shares
// with storaged). The server writes all of it while reading the frame and never after.
class PlacedFrame {
 public:
  virtual ~PlacedFrame() = default;
  virtual uint8_t* data() = 0;
  virtual size_t size() const = 0;
};
// Where to read a frame of `size` bytes for `api_key`: nullptr for the server's own buffer.
using FramePlacer = std::function<std::shared_ptr<PlacedFrame>(int16_t api_key, size_t size)>;

struct RequestContext {
  protocol::RequestHeader header;
  FrameBytes frame;                     // the frame without its 4-byte size prefix, unless...
  std::shared_ptr<PlacedFrame> placed;  // ...it was read here instead
  size_t body_offset = 0;               // where the body starts in the frame
  std::string listener;                 // name of the listener the connection came in on
  std::string peer;                     // "ip:port" of the client
  uint64_t connection_id = 0;

  std::span<const uint8_t> bytes() const {
    if (placed) return std::span<const uint8_t>(placed->data(), placed->size());
    return std::span<const uint8_t>(frame);
  }
  std::span<const uint8_t> body() const { return bytes().subspan(body_offset); }
};

// What a handler answers. `bytes` starts with kSizePrefixBytes reserved bytes, which the
// server fills with the size of what follows (the response header and body, file bytes
// included), so the response is written without another copy.
//
// `inserts` are file ranges that belong inside the response (a Fetch response's records):
// the server sends bytes[0, at1), slice 1, bytes[at1, at2), slice 2, ..., the rest of
// bytes, the slices with sendfile. They must be sorted by `at` and lie in
// [kSizePrefixBytes, bytes.size()]; encode with a protocol::Writer whose insert sink is
// `inserts` to get them.
inline constexpr size_t kSizePrefixBytes = 4;

struct Response {
  enum class Kind {
    kSend,        // send `bytes`
    kNoResponse,  // nothing is sent (Produce with acks=0)
    kClose,       // a malformed request: close the connection, as Kafka does
  };
  Kind kind = Kind::kSend;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kSizePrefixBytes);
  std::vector<protocol::FileInsert> inserts;
  // For the request metrics only: the answer's top-level error code, or its first
  // per-partition one where a handler says so (Produce, Fetch).
  protocol::ErrorCode error = protocol::ErrorCode::kNone;

  static Response Close() { return Response{Kind::kClose, {}, {}, protocol::ErrorCode::kNone}; }
  static Response None() { return Response{Kind::kNoResponse, {}, {}, protocol::ErrorCode::kNone}; }
};

// Called exactly once per request, on the loop thread. Responses go out in request order
// whatever order the handlers finish in.
using Respond = std::function<void(Response)>;

class RequestDispatcher {
 public:
  virtual ~RequestDispatcher() = default;
  virtual void Dispatch(std::unique_ptr<RequestContext> request, Respond respond) = 0;
};

}  // namespace runnel::brokerd
