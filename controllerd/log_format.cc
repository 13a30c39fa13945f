#include "controllerd/log_format.h"

#include <fmt/format.h>

#include <cstring>

#include "common/util/crc32c.h"

namespace runnel::controllerd::logformat {
namespace {

// Parses exactly `digits` decimal digits.
std::optional<int64_t> ParseDigits(std::string_view s, size_t digits) {
  if (s.size() != digits) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (v > (INT64_MAX - (c - '0')) / 10) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string EncodeFrame(int64_t offset, int64_t term, std::string_view payload) {
  std::string out(kHeaderSize + payload.size(), '\0');
  PutU32(out.data(), static_cast<uint32_t>(kMinFrameLength + payload.size()));
  PutU64(out.data() + 8, static_cast<uint64_t>(offset));
  PutU64(out.data() + 16, static_cast<uint64_t>(term));
  if (!payload.empty()) std::memcpy(out.data() + kHeaderSize, payload.data(), payload.size());
  PutU32(out.data() + 4, crc32c::Value(out.data() + 8, out.size() - 8));
  return out;
}

Decoded DecodeFrame(std::string_view data) {
  Decoded d;
  if (data.size() < kLengthFieldSize) {
    d.status = DecodeStatus::kIncomplete;
    d.why = fmt::format("{} byte(s) where a frame's 4-byte length should be", data.size());
    return d;
  }
  uint32_t length = GetU32(data.data());
  if (length < kMinFrameLength || length > kMaxFrameLength) {
    d.status = DecodeStatus::kCorrupt;
    d.why = fmt::format("frame length {} is outside [{}, {}]", length, kMinFrameLength,
                        kMaxFrameLength);
    return d;
  }
  if (data.size() - kLengthFieldSize < length) {
    d.status = DecodeStatus::kIncomplete;
    d.why = fmt::format("frame of length {} cut short: only {} byte(s) follow its length", length,
                        data.size() - kLengthFieldSize);
    return d;
  }
  uint32_t stored_crc = GetU32(data.data() + 4);
  uint32_t crc = crc32c::Value(data.data() + 8, length - 4);
  if (crc != stored_crc) {
    d.status = DecodeStatus::kCorrupt;
    d.why = fmt::format("crc mismatch (stored {:#010x}, computed {:#010x})", stored_crc, crc);
    return d;
  }
  d.status = DecodeStatus::kOk;
  d.frame.offset = static_cast<int64_t>(GetU64(data.data() + 8));
  d.frame.term = static_cast<int64_t>(GetU64(data.data() + 16));
  d.frame.payload = data.substr(kHeaderSize, length - kMinFrameLength);
  d.frame_size = kLengthFieldSize + length;
  return d;
}

std::string SegmentFileName(int64_t base_offset) {
  return fmt::format("{:020d}{}", base_offset, kSegmentSuffix);
}

std::optional<int64_t> ParseSegmentFileName(std::string_view name) {
  if (!name.ends_with(kSegmentSuffix)) return std::nullopt;
  return ParseDigits(name.substr(0, name.size() - kSegmentSuffix.size()), 20);
}

std::string SnapshotFileName(SnapshotId id) {
  return fmt::format("{:020d}-{:010d}{}", id.end_offset, id.epoch, kSnapshotSuffix);
}

std::optional<SnapshotId> ParseSnapshotFileName(std::string_view name) {
  if (!name.ends_with(kSnapshotSuffix)) return std::nullopt;
  name.remove_suffix(kSnapshotSuffix.size());
  if (name.size() != 31 || name[20] != '-') return std::nullopt;
  auto offset = ParseDigits(name.substr(0, 20), 20);
  auto epoch = ParseDigits(name.substr(21), 10);
  if (!offset || !epoch) return std::nullopt;
  return SnapshotId{*offset, *epoch};
}

}  // namespace runnel::controllerd::logformat
