// On-disk format of the cluster metadata log and its snapshots.
//
// Directory: <metadata.log.dir>/__cluster_metadata-0/
//   <20-digit base offset>.log                    a log segment: frames, back to back
//   <20-digit end offset>-<10-digit epoch>.checkpoint   a snapshot: exactly one frame
//   *.tmp                                         a snapshot being written; removed at open
//
// A frame (all integers big-endian, as Kafka's):
//
//   +0   u32  length   bytes after this field: 20 + payload size (>= 20, <= kMaxFrameLength)
//   +4   u32  crc      CRC32C (Castagnoli) of bytes [+8, +4 + length): offset, term, payload
//   +8   i64  offset   log entry: its offset (consecutive from the segment's base offset)
//                      snapshot:  its end offset (the first log offset NOT in the image)
//   +16  i64  term     log entry: the Raft term (epoch) it was appended in
//                      snapshot:  the term of the last entry in the image
//   +24  ...  payload  a serialized runnel.metadata.MetadataRecordBatch
//
// One log entry is one batch: its records are applied all together, and the entry's offset
// is the unit of WatchMetadata and of snapshots. A segment's name is the offset of its first
// entry; a new segment starts at each snapshot. Entries are appended and fdatasync'ed before
// they are acknowledged or applied. On open, a frame that is cut short (torn write), has a
// bad length, a bad crc, a non-consecutive offset or a decreasing term ends the log there:
// the file is truncated at the last good frame and later segments are removed, and what
// was cut is logged.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/util/big_endian.h"

namespace runnel::controllerd::logformat {

inline constexpr std::string_view kPartitionDirName = "__cluster_metadata-0";
inline constexpr std::string_view kSegmentSuffix = ".log";
inline constexpr std::string_view kSnapshotSuffix = ".checkpoint";
inline constexpr std::string_view kTempSuffix = ".tmp";

inline constexpr size_t kLengthFieldSize = 4;
inline constexpr size_t kHeaderSize = 24;  // length + crc + offset + term
inline constexpr uint32_t kMinFrameLength = 20;
// A metadata batch is small; a bigger length is corruption, not a reason to allocate.
inline constexpr uint32_t kMaxFrameLength = 256u << 20;

// Big-endian integers at `p`, as every field of these files is stored: big_endian.h's helpers
// over the char buffers (std::string) these files are read into and built in.
inline void PutU32(char* p, uint32_t v) { StoreBigEndian32(reinterpret_cast<uint8_t*>(p), v); }
inline void PutU64(char* p, uint64_t v) { StoreBigEndian(reinterpret_cast<uint8_t*>(p), v, 8); }
inline uint32_t GetU32(const char* p) {
  return LoadBigEndian32(reinterpret_cast<const uint8_t*>(p));
}
inline uint64_t GetU64(const char* p) {
  return LoadBigEndian64(reinterpret_cast<const uint8_t*>(p));
}

struct Frame {
  int64_t offset = 0;
  int64_t term = 0;
  std::string_view payload;  // points into the decoded buffer
};

// The bytes of one frame.
std::string EncodeFrame(int64_t offset, int64_t term, std::string_view payload);

enum class DecodeStatus {
  kOk,
  kIncomplete,  // fewer bytes than the frame needs: a torn tail
  kCorrupt,     // bad length or crc
};

struct Decoded {
  DecodeStatus status = DecodeStatus::kCorrupt;
  Frame frame;
  size_t frame_size = 0;  // bytes the frame takes, when kOk
  std::string why;        // when not kOk
};

// Decodes the frame at the start of `data`; never reads past it.
Decoded DecodeFrame(std::string_view data);

// File names (one place for them; see the table test).
std::string SegmentFileName(int64_t base_offset);
std::optional<int64_t> ParseSegmentFileName(std::string_view name);

struct SnapshotId {
  int64_t end_offset = 0;  // first offset not in the snapshot
  int64_t epoch = 0;
  // clang-tidy 14 takes the 0 that a defaulted <=> compares with for a null pointer
  // (llvm/llvm-project#53961, fixed in clang-tidy 18).
  // NOLINTNEXTLINE(modernize-use-nullptr)
  auto operator<=>(const SnapshotId&) const = default;
};
std::string SnapshotFileName(SnapshotId id);
std::optional<SnapshotId> ParseSnapshotFileName(std::string_view name);

}  // namespace runnel::controllerd::logformat
