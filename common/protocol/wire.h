// Kafka wire primitives: a bounds-checked Reader and an appending Writer.
//
// Reader never trusts a length: every string, bytes and array length is checked against the
// bytes remaining before anything is allocated, and every failure is an absl::Status
// (InvalidArgument) naming what was wrong; nothing throws or aborts on hostile input.
// SizeCounter has the Writer's interface but only counts, so one templated encoder gives both
// Encode() and Size().
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/records.h"
#include "common/protocol/uuid.h"
#include "common/util/big_endian.h"

namespace runnel::protocol {

// (Bytes, a std::vector<uint8_t>, comes from records.h.)

// Kafka caps strings at 32767 bytes in both the int16 and the compact encodings.
inline constexpr size_t kMaxStringLength = 0x7fff;

// A tagged field this code does not know (or does not know at the decoded version), kept so
// that decode + encode gives back what was received.
struct RawTaggedField {
  uint32_t tag = 0;
  Bytes data;
  bool operator==(const RawTaggedField&) const = default;
};

// Sizes of the variable-length integer encodings.
size_t UnsignedVarintSize(uint32_t v);
size_t UnsignedVarlongSize(uint64_t v);
inline size_t VarintSize(int32_t v) {
  return UnsignedVarintSize((static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31));
}
inline size_t VarlongSize(int64_t v) {
  return UnsignedVarlongSize((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> data) : data_(data) {}

  // From now on ReadRecords sets Records::borrowed (a view into the decoded buffer) instead
  // of copying the payload into Records::data. The caller keeps the buffer alive as long as
  // the decoded message is used.
  void BorrowRecords() { borrow_records_ = true; }

  size_t position() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }
  bool empty() const { return pos_ == data_.size(); }
  // The bytes not read yet.
  std::span<const uint8_t> rest() const { return data_.subspan(pos_); }

  [[nodiscard]] absl::Status ReadInt8(int8_t* out);
  [[nodiscard]] absl::Status ReadInt16(int16_t* out);
  [[nodiscard]] absl::Status ReadInt32(int32_t* out);
  [[nodiscard]] absl::Status ReadInt64(int64_t* out);
  [[nodiscard]] absl::Status ReadUint16(uint16_t* out);
  [[nodiscard]] absl::Status ReadUint32(uint32_t* out);
  [[nodiscard]] absl::Status ReadFloat64(double* out);
  // Any non-zero byte is true, as in Kafka.
  [[nodiscard]] absl::Status ReadBool(bool* out);
  [[nodiscard]] absl::Status ReadUuid(Uuid* out);

  // Kafka's varints: unsigned LEB128 (at most 5 / 10 bytes), signed ones zigzag-encoded.
  [[nodiscard]] absl::Status ReadUnsignedVarint(uint32_t* out);
  [[nodiscard]] absl::Status ReadUnsignedVarlong(uint64_t* out);
  [[nodiscard]] absl::Status ReadVarint(int32_t* out);
  [[nodiscard]] absl::Status ReadVarlong(int64_t* out);

  // Strings: int16 length (-1 = null) or, when `compact`, unsigned varint length+1 (0 =
  // null). A null where `nullable` is false, a negative length other than null, or a length
  // past the end or above kMaxStringLength is an error.
  [[nodiscard]] absl::Status ReadString(std::string* out, bool compact);
  [[nodiscard]] absl::Status ReadNullableString(std::optional<std::string>* out, bool compact,
                                                bool nullable);
  // Bytes: int32 length (-1 = null) or compact unsigned varint length+1.
  [[nodiscard]] absl::Status ReadBytes(Bytes* out, bool compact);
  [[nodiscard]] absl::Status ReadNullableBytes(std::optional<Bytes>* out, bool compact,
                                               bool nullable);
  [[nodiscard]] absl::Status ReadRecords(Records* out, bool compact, bool nullable);

  // An array's element count: int32 (-1 = null) or compact unsigned varint count+1. Sets
  // *out to -1 for null. The count times `min_element_size` (at least 1) must fit in the
  // bytes remaining, so a hostile count never reaches an allocation.
  [[nodiscard]] absl::Status ReadArrayLength(int32_t* out, bool compact, bool nullable,
                                             size_t min_element_size);

  // The next `n` bytes, without copying.
  [[nodiscard]] absl::Status ReadRaw(size_t n, std::span<const uint8_t>* out);
  [[nodiscard]] absl::Status Skip(size_t n);

 private:
  absl::Status Need(size_t n, const char* what) const;
  // A bytes-like field (int32 or compact length, -1 = null) as a view into data_.
  absl::Status ReadNullableView(std::optional<std::span<const uint8_t>>* out, bool compact,
                                bool nullable, const char* what);
  // Reads a string/bytes length prefix; *len is -1 for null.
  absl::Status ReadLength(bool compact, bool wide, int64_t* len, const char* what);

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  bool borrow_records_ = false;
};

// Where a file slice goes in an encoded message: its bytes belong at byte `at` of the
// output buffer (before the byte now at `at`), and are not in the buffer.
struct FileInsert {
  size_t at = 0;
  FileSlice slice;
  bool operator==(const FileInsert&) const = default;
};

// Appends the encoding to a byte vector (which may already hold bytes, e.g. a frame header).
//
// Records held as file slices (see records.h) are written as their length prefix only, with
// one FileInsert per slice recorded in the insert sink, when the Writer has one: the caller
// sends the file bytes at those offsets itself (brokerd with sendfile). Without a sink the
// slices are read into the buffer with pread, a correct but copying fallback.
//
// Encoding cannot fail except for that fallback's reads (and for file slices that are not
// valid). The first such failure is kept in status(); the output is then not a valid
// encoding. Callers that may encode file slices without a sink check status() afterwards.
class Writer {
 public:
  explicit Writer(Bytes& out) : out_(&out) {}
  Writer(Bytes& out, std::vector<FileInsert>* file_inserts)
      : out_(&out), file_inserts_(file_inserts) {}

  // Bytes in the underlying buffer, including any present before this Writer.
  size_t size() const { return out_->size(); }
  Bytes& buffer() { return *out_; }

  // Where file slices are recorded instead of being read into the buffer; null for none.
  void set_file_inserts(std::vector<FileInsert>* file_inserts) { file_inserts_ = file_inserts; }
  std::vector<FileInsert>* file_inserts() const { return file_inserts_; }
  // OK, or the first failure (see the class comment).
  const absl::Status& status() const { return status_; }

  void WriteInt8(int8_t v) { out_->push_back(static_cast<uint8_t>(v)); }
  void WriteInt16(int16_t v) { PutBigEndian(static_cast<uint16_t>(v), 2); }
  void WriteInt32(int32_t v) { PutBigEndian(static_cast<uint32_t>(v), 4); }
  void WriteInt64(int64_t v) { PutBigEndian(static_cast<uint64_t>(v), 8); }
  void WriteUint16(uint16_t v) { PutBigEndian(v, 2); }
  void WriteUint32(uint32_t v) { PutBigEndian(v, 4); }
  void WriteFloat64(double v);
  void WriteBool(bool v) { out_->push_back(v ? 1 : 0); }
  void WriteUuid(const Uuid& v) { WriteRaw(v.bytes); }

  void WriteUnsignedVarint(uint32_t v);
  void WriteUnsignedVarlong(uint64_t v);
  void WriteVarint(int32_t v) {
    WriteUnsignedVarint((static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31));
  }
  void WriteVarlong(int64_t v) {
    WriteUnsignedVarlong((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }

  // A string longer than kMaxStringLength is not encodable (CheckEncodable reports it); it
  // is written truncated rather than with a wrapped length.
  void WriteString(std::string_view s, bool compact);
  // Null is written as Kafka's null marker when `nullable`, else as an empty string.
  void WriteNullableString(const std::optional<std::string>& s, bool compact, bool nullable);
  void WriteBytes(std::span<const uint8_t> b, bool compact);
  void WriteNullableBytes(const std::optional<Bytes>& b, bool compact, bool nullable);
  void WriteRecords(const Records& r, bool compact, bool nullable) {
    if (!r.files.empty()) {
      WriteFileRecords(r.files, compact);
    } else if (r.borrowed) {
      WriteBytes(*r.borrowed, compact);
    } else {
      WriteNullableBytes(r.data, compact, nullable);
    }
  }
  void WriteArrayLength(size_t n, bool compact);
  void WriteNullArrayLength(bool compact);
  void WriteRaw(std::span<const uint8_t> b) { out_->insert(out_->end(), b.begin(), b.end()); }

 private:
  void PutBigEndian(uint64_t v, int n) {
    uint8_t buf[8];
    StoreBigEndian(buf, v, static_cast<size_t>(n));
    out_->insert(out_->end(), buf, buf + n);
  }
  void WriteFileRecords(const std::vector<FileSlice>& files, bool compact);
  // Appends the slice's bytes read with pread (status_ set on a failure).
  void ReadSlice(const FileSlice& slice);
  void Fail(absl::Status status) {
    if (status_.ok()) status_ = std::move(status);
  }

  Bytes* out_;
  std::vector<FileInsert>* file_inserts_ = nullptr;
  absl::Status status_;
};

// The Writer's interface, counting bytes instead of writing them.
class SizeCounter {
 public:
  size_t size() const { return size_; }

  void WriteInt8(int8_t) { size_ += 1; }
  void WriteInt16(int16_t) { size_ += 2; }
  void WriteInt32(int32_t) { size_ += 4; }
  void WriteInt64(int64_t) { size_ += 8; }
  void WriteUint16(uint16_t) { size_ += 2; }
  void WriteUint32(uint32_t) { size_ += 4; }
  void WriteFloat64(double) { size_ += 8; }
  void WriteBool(bool) { size_ += 1; }
  void WriteUuid(const Uuid&) { size_ += 16; }
  void WriteUnsignedVarint(uint32_t v) { size_ += UnsignedVarintSize(v); }
  void WriteUnsignedVarlong(uint64_t v) { size_ += UnsignedVarlongSize(v); }
  void WriteVarint(int32_t v) { size_ += VarintSize(v); }
  void WriteVarlong(int64_t v) { size_ += VarlongSize(v); }
  void WriteString(std::string_view s, bool compact);
  void WriteNullableString(const std::optional<std::string>& s, bool compact, bool nullable);
  void WriteBytes(std::span<const uint8_t> b, bool compact);
  void WriteNullableBytes(const std::optional<Bytes>& b, bool compact, bool nullable);
  // File slices count as the bytes they stand for, as they are on the wire.
  void WriteRecords(const Records& r, bool compact, bool nullable) {
    if (!r.files.empty()) {
      size_t n = r.SizeInBytes();
      size_ += (compact ? UnsignedVarintSize(static_cast<uint32_t>(n + 1)) : 4) + n;
    } else if (r.borrowed) {
      WriteBytes(*r.borrowed, compact);
    } else {
      WriteNullableBytes(r.data, compact, nullable);
    }
  }
  void WriteArrayLength(size_t n, bool compact);
  void WriteNullArrayLength(bool compact) { size_ += compact ? 1 : 4; }
  void WriteRaw(std::span<const uint8_t> b) { size_ += b.size(); }

 private:
  size_t size_ = 0;
};

}  // namespace runnel::protocol
