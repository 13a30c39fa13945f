// Produce bytes handed to the local storaged through shared memory instead of through gRPC.
//
// Carrying every produced byte in an Append message costs the protobuf copy, gRPC's copies
// on both sides, two trips through the Unix socket and storaged's parse. Instead the bytes
// are copied once into a memfd region that storaged maps (storage::SharedBytes names them),
// and the gRPC call carries only that name.
//
// The one rule that keeps this safe: brokerd never writes a block again once its call has
// been sent, until storaged has answered it. A block is reused only after its calls
// succeeded; when a call fails (timed out, cancelled, storaged gone) storaged may still be
// reading the block, so the whole region is abandoned: it is never written again, and a new
// region takes its place. A region is unmapped when its last block is let go.
//
// A large produce request can be read from its socket straight into a block (the block is
// a PlacedFrame), and then its records are named where they lie, with no copy at all. Such
// blocks come from a region of their own: a client that sends its request slowly holds its
// block for as long, and since a region's space comes back in order, it would otherwise
// hold up the copies of every other connection's appends too.
//
// Everything here runs on the loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "brokerd/net/request.h"
#include "proto/runnel/storage.pb.h"

namespace runnel::brokerd {

// First-fit in allocation order over [0, size): blocks are taken after the newest one,
// wrapping to 0, and space comes back when the oldest blocks are freed. A block freed out
// of order is reclaimed once every older one is.
class RingAllocator {
 public:
  explicit RingAllocator(uint64_t size) : size_(size) {}

  // The offset of a block of `length` bytes (rounded up to 64), or nullopt when no room.
  std::optional<uint64_t> Alloc(uint64_t length);
  // Frees the block at `offset`; false when no live block starts there.
  bool Free(uint64_t offset);

  size_t live_blocks() const { return blocks_.size(); }

 private:
  struct Block {
    uint64_t offset;
    uint64_t length;
    bool freed;
  };
  uint64_t size_;
  uint64_t head_ = 0;         // where the next block starts (when it fits)
  std::deque<Block> blocks_;  // allocation order; the front is the oldest
};

// One memfd, mapped read-write in this process.
class SharedRegion {
 public:
  // nullptr (with the reason in *error) when the memfd cannot be made or mapped.
  static std::shared_ptr<SharedRegion> Create(uint64_t size, std::string* error);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint8_t* base() const { return base_; }
  RingAllocator& allocator() { return allocator_; }
  void Describe(uint64_t offset, uint64_t length, storage::SharedBytes* out) const;

  bool abandoned = false;

 private:
  SharedRegion(int fd, uint64_t inode, uint8_t* base, uint64_t size);
  int fd_;
  uint64_t inode_;
  uint8_t* base_;
  uint64_t size_;
  RingAllocator allocator_;
};

// A block of a region. Its space is given back when its last holder lets go, unless the
// region was abandoned meanwhile.
class SharedBlock : public PlacedFrame {
 public:
  SharedBlock(std::shared_ptr<SharedRegion> region, uint64_t offset, uint64_t length)
      : region_(std::move(region)), offset_(offset), length_(length) {}
  ~SharedBlock() override;
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;

  uint8_t* data() override { return region_->base() + offset_; }
  size_t size() const override { return length_; }
  const std::shared_ptr<SharedRegion>& region() const { return region_; }
  // storaged's name for the `length` bytes at data() + `at`.
  void Describe(uint64_t at, uint64_t length, storage::SharedBytes* out) const {
    region_->Describe(offset_ + at, length, out);
  }

 private:
  std::shared_ptr<SharedRegion> region_;
  uint64_t offset_;
  uint64_t length_;
};

class AppendArena {
 public:
  // Bytes held by a call in flight. Empty when they went in the message.
  using Block = std::shared_ptr<SharedBlock>;

  // `region_bytes` 0 turns the arena off: every append carries its bytes in the message.
  explicit AppendArena(uint64_t region_bytes) : region_bytes_(region_bytes) {}

  // A block of `length` bytes to read a request into, from the frames' region, or nullptr
  // when the arena is off or that region is full.
  Block ReserveFrame(uint64_t length);
  // Puts `bytes` in `out`: named where they are when they lie in `within` (a block of this
  // arena's, written and not to be written again), else copied into shared memory (the
  // copies' region) when there is room (out->shared names them), otherwise in out->records.
  // Returns the block to Release or Abandon when the call ends.
  Block Put(std::span<const uint8_t> bytes, storage::AppendPartition* out,
            const std::shared_ptr<PlacedFrame>& within = nullptr);
  // The call holding `block` succeeded: its space may be reused once nothing else holds it.
  void Release(Block& block);
  // The call holding `block` failed, so storaged may still use it: its region is not
  // written again. `shared_unusable` says storaged could not map the region at all, which
  // turns shared memory off for this process's life.
  void Abandon(Block& block, bool shared_unusable, const std::string& why);

  bool enabled() const { return region_bytes_ > 0; }
  uint64_t region_bytes() const { return region_bytes_; }  // 0 when off

 private:
  // A block of `current`, made first when there is none (or it was abandoned).
  Block Allocate(std::shared_ptr<SharedRegion>& current, uint64_t length);

  uint64_t region_bytes_;
  std::shared_ptr<SharedRegion> copies_;  // for Put's copies
  std::shared_ptr<SharedRegion> frames_;  // for ReserveFrame
};

}  // namespace runnel::brokerd
