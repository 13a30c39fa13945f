#include "brokerd/storage/append_arena.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/log/log.h"

namespace runnel::brokerd {
namespace {

constexpr uint64_t kAlign = 64;

const log::ModuleLogger kLog("brokerd.arena");

}  // namespace

std::optional<uint64_t> RingAllocator::Alloc(uint64_t length) {
  if (length == 0 || length > size_) return std::nullopt;
  length = (length + kAlign - 1) / kAlign * kAlign;
  if (length > size_) return std::nullopt;
  uint64_t offset;
  if (blocks_.empty()) {
    offset = 0;
  } else {
    const uint64_t tail = blocks_.front().offset;
    if (head_ > tail) {
      // Not wrapped: free space is [head_, size_) and [0, tail).
      if (size_ - head_ >= length) {
        offset = head_;
      } else if (tail >= length) {
        offset = 0;
      } else {
        return std::nullopt;
      }
    } else {
      // Wrapped (head_ <= tail; equal means full): free space is [head_, tail).
      if (tail - head_ < length) return std::nullopt;
      offset = head_;
    }
  }
  blocks_.push_back(Block{offset, length, false});
  head_ = offset + length;
  return offset;
}

bool RingAllocator::Free(uint64_t offset) {
  bool found = false;
  for (Block& b : blocks_) {
    if (b.offset == offset && !b.freed) {
      b.freed = true;
      found = true;
      break;
    }
  }
  while (!blocks_.empty() && blocks_.front().freed) blocks_.pop_front();
  return found;
}

std::shared_ptr<SharedRegion> SharedRegion::Create(uint64_t size, std::string* error) {
  int fd = ::memfd_create("runnel-append", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    *error = fmt::format("memfd_create: {}", std::strerror(errno));
    return nullptr;
  }
  struct stat st;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0 || ::fstat(fd, &st) != 0) {
    *error = fmt::format("sizing the memfd to {} bytes: {}", size, std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  // The size is final: storaged maps what fstat says, and neither side may change it.
  ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *error = fmt::format("mmap of {} bytes: {}", size, std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  return std::shared_ptr<SharedRegion>(
      new SharedRegion(fd, static_cast<uint64_t>(st.st_ino), static_cast<uint8_t*>(base), size));
}

SharedRegion::SharedRegion(int fd, uint64_t inode, uint8_t* base, uint64_t size)
    : fd_(fd), inode_(inode), base_(base), size_(size), allocator_(size) {}

SharedRegion::~SharedRegion() {
  ::munmap(base_, size_);
  ::close(fd_);
}

void SharedRegion::Describe(uint64_t offset, uint64_t length, storage::SharedBytes* out) const {
  out->set_pid(static_cast<int32_t>(::getpid()));
  out->set_fd(fd_);
  out->set_inode(inode_);
  out->set_offset(offset);
  out->set_length(length);
}

SharedBlock::~SharedBlock() {
  if (!region_->abandoned) region_->allocator().Free(offset_);
}

AppendArena::Block AppendArena::Allocate(std::shared_ptr<SharedRegion>& current, uint64_t length) {
  if (region_bytes_ == 0 || length == 0) return nullptr;
  if (!current) {
    std::string error;
    current = SharedRegion::Create(region_bytes_, &error);
    if (!current) {
      kLog()->warn("produce bytes go through gRPC from now on: no shared memory ({})", error);
      region_bytes_ = 0;
      return nullptr;
    }
  }
  std::optional<uint64_t> offset = current->allocator().Alloc(length);
  if (!offset) return nullptr;  // more bytes in flight than the region holds, for now
  return std::make_shared<SharedBlock>(current, *offset, length);
}

AppendArena::Block AppendArena::ReserveFrame(uint64_t length) { return Allocate(frames_, length); }

AppendArena::Block AppendArena::Put(std::span<const uint8_t> bytes, storage::AppendPartition* out,
                                    const std::shared_ptr<PlacedFrame>& within) {
  if (region_bytes_ > 0 && !bytes.empty()) {
    // Where the bytes already are, if that is a block storaged may still be given.
    if (auto block = std::dynamic_pointer_cast<SharedBlock>(within);
        block && !block->region()->abandoned && bytes.data() >= block->data() &&
        bytes.data() + bytes.size() <= block->data() + block->size()) {
      block->Describe(static_cast<uint64_t>(bytes.data() - block->data()), bytes.size(),
                      out->mutable_shared());
      return block;
    }
    if (Block block = Allocate(copies_, bytes.size())) {
      std::memcpy(block->data(), bytes.data(), bytes.size());
      block->Describe(0, bytes.size(), out->mutable_shared());
      return block;
    }
  }
  // Off, or full for now: in the message.
  out->set_records(bytes.data(), bytes.size());
  return nullptr;
}

void AppendArena::Release(Block& block) { block.reset(); }

void AppendArena::Abandon(Block& block, bool shared_unusable, const std::string& why) {
  if (!block) return;
  const std::shared_ptr<SharedRegion>& region = block->region();
  if (!region->abandoned) {
    region->abandoned = true;
    kLog()->info(
        "a storaged call holding shared produce bytes failed ({}); its region is not "
        "reused",
        why);
  }
  if (copies_ == region) copies_.reset();
  if (frames_ == region) frames_.reset();
  if (shared_unusable && region_bytes_ > 0) {
    kLog()->warn(
        "produce bytes go through gRPC from now on: storaged cannot map brokerd's "
        "shared memory ({})",
        why);
    region_bytes_ = 0;
  }
  block.reset();
}

}  // namespace runnel::brokerd
