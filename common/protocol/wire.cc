#include "common/protocol/wire.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/util/big_endian.h"

namespace runnel::protocol {
namespace {

absl::Status Malformed(const std::string& message) { return absl::InvalidArgumentError(message); }

// Longest payload a string/bytes length prefix can describe.
constexpr int64_t kMaxWideLength = std::numeric_limits<int32_t>::max();

}  // namespace

size_t UnsignedVarintSize(uint32_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

size_t UnsignedVarlongSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// ---- Reader ----

absl::Status Reader::Need(size_t n, const char* what) const {
  if (n <= remaining()) return absl::OkStatus();
  return Malformed(std::string("truncated ") + what + ": needs " + std::to_string(n) +
                   " bytes at offset " + std::to_string(pos_) + ", " + std::to_string(remaining()) +
                   " left");
}

absl::Status Reader::ReadInt8(int8_t* out) {
  if (auto s = Need(1, "int8"); !s.ok()) return s;
  *out = static_cast<int8_t>(data_[pos_++]);
  return absl::OkStatus();
}

absl::Status Reader::ReadInt16(int16_t* out) {
  uint16_t v;
  if (auto s = ReadUint16(&v); !s.ok()) return s;
  *out = static_cast<int16_t>(v);
  return absl::OkStatus();
}

absl::Status Reader::ReadUint16(uint16_t* out) {
  if (auto s = Need(2, "int16"); !s.ok()) return s;
  *out = LoadBigEndian16(&data_[pos_]);
  pos_ += 2;
  return absl::OkStatus();
}

absl::Status Reader::ReadInt32(int32_t* out) {
  uint32_t v;
  if (auto s = ReadUint32(&v); !s.ok()) return s;
  *out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

absl::Status Reader::ReadUint32(uint32_t* out) {
  if (auto s = Need(4, "int32"); !s.ok()) return s;
  *out = LoadBigEndian32(&data_[pos_]);
  pos_ += 4;
  return absl::OkStatus();
}

absl::Status Reader::ReadInt64(int64_t* out) {
  if (auto s = Need(8, "int64"); !s.ok()) return s;
  *out = static_cast<int64_t>(LoadBigEndian64(&data_[pos_]));
  pos_ += 8;
  return absl::OkStatus();
}

absl::Status Reader::ReadFloat64(double* out) {
  int64_t bits;
  if (auto s = ReadInt64(&bits); !s.ok()) return s;
  *out = std::bit_cast<double>(bits);
  return absl::OkStatus();
}

absl::Status Reader::ReadBool(bool* out) {
  if (auto s = Need(1, "bool"); !s.ok()) return s;
  *out = data_[pos_++] != 0;
  return absl::OkStatus();
}

absl::Status Reader::ReadUuid(Uuid* out) {
  if (auto s = Need(16, "uuid"); !s.ok()) return s;
  std::memcpy(out->bytes.data(), data_.data() + pos_, 16);
  pos_ += 16;
  return absl::OkStatus();
}

absl::Status Reader::ReadUnsignedVarint(uint32_t* out) {
  uint32_t v = 0;
  for (int i = 0; i < 5; ++i) {
    if (pos_ >= data_.size()) return Need(1, "varint");
    uint8_t b = data_[pos_++];
    // The fifth byte may only carry the top 4 bits of a 32-bit value.
    if (i == 4 && b > 0x0f) return Malformed("varint does not fit in 32 bits");
    v |= static_cast<uint32_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      *out = v;
      return absl::OkStatus();
    }
  }
  return Malformed("varint does not fit in 32 bits");  // unreachable: i == 4 returns above
}

absl::Status Reader::ReadUnsignedVarlong(uint64_t* out) {
  uint64_t v = 0;
  for (int i = 0; i < 10; ++i) {
    if (pos_ >= data_.size()) return Need(1, "varlong");
    uint8_t b = data_[pos_++];
    // The tenth byte may only carry the top bit of a 64-bit value.
    if (i == 9 && b > 0x01) return Malformed("varlong does not fit in 64 bits");
    v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      *out = v;
      return absl::OkStatus();
    }
  }
  return Malformed("varlong does not fit in 64 bits");
}

absl::Status Reader::ReadVarint(int32_t* out) {
  uint32_t v;
  if (auto s = ReadUnsignedVarint(&v); !s.ok()) return s;
  *out = static_cast<int32_t>((v >> 1) ^ (~(v & 1) + 1));
  return absl::OkStatus();
}

absl::Status Reader::ReadVarlong(int64_t* out) {
  uint64_t v;
  if (auto s = ReadUnsignedVarlong(&v); !s.ok()) return s;
  *out = static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  return absl::OkStatus();
}

absl::Status Reader::ReadLength(bool compact, bool wide, int64_t* len, const char* what) {
  if (compact) {
    uint32_t n;
    if (auto s = ReadUnsignedVarint(&n); !s.ok()) return s;
    *len = static_cast<int64_t>(n) - 1;
  } else if (wide) {
    int32_t n;
    if (auto s = ReadInt32(&n); !s.ok()) return s;
    *len = n;
  } else {
    int16_t n;
    if (auto s = ReadInt16(&n); !s.ok()) return s;
    *len = n;
  }
  if (*len < -1)
    return Malformed(std::string("negative ") + what + " length " + std::to_string(*len));
  if (*len > static_cast<int64_t>(remaining())) {
    return Malformed(std::string(what) + " length " + std::to_string(*len) + " exceeds the " +
                     std::to_string(remaining()) + " bytes left");
  }
  if (*len > kMaxWideLength) return Malformed(std::string(what) + " too long");
  return absl::OkStatus();
}

absl::Status Reader::ReadString(std::string* out, bool compact) {
  std::optional<std::string> v;
  if (auto s = ReadNullableString(&v, compact, /*nullable=*/false); !s.ok()) return s;
  *out = std::move(*v);
  return absl::OkStatus();
}

absl::Status Reader::ReadNullableString(std::optional<std::string>* out, bool compact,
                                        bool nullable) {
  int64_t len;
  if (auto s = ReadLength(compact, /*wide=*/false, &len, "string"); !s.ok()) return s;
  if (len < 0) {
    if (!nullable) return Malformed("null string in a non-nullable field");
    out->reset();
    return absl::OkStatus();
  }
  if (static_cast<size_t>(len) > kMaxStringLength) {
    return Malformed("string length " + std::to_string(len) + " is above 32767");
  }
  out->emplace(reinterpret_cast<const char*>(data_.data() + pos_), static_cast<size_t>(len));
  pos_ += static_cast<size_t>(len);
  return absl::OkStatus();
}

absl::Status Reader::ReadBytes(Bytes* out, bool compact) {
  std::optional<Bytes> v;
  if (auto s = ReadNullableBytes(&v, compact, /*nullable=*/false); !s.ok()) return s;
  *out = std::move(*v);
  return absl::OkStatus();
}

absl::Status Reader::ReadNullableView(std::optional<std::span<const uint8_t>>* out, bool compact,
                                      bool nullable, const char* what) {
  int64_t len;
  if (auto s = ReadLength(compact, /*wide=*/true, &len, what); !s.ok()) return s;
  if (len < 0) {
    if (!nullable) return Malformed(std::string("null ") + what + " in a non-nullable field");
    out->reset();
    return absl::OkStatus();
  }
  *out = data_.subspan(pos_, static_cast<size_t>(len));
  pos_ += static_cast<size_t>(len);
  return absl::OkStatus();
}

absl::Status Reader::ReadNullableBytes(std::optional<Bytes>* out, bool compact, bool nullable) {
  std::optional<std::span<const uint8_t>> view;
  if (auto s = ReadNullableView(&view, compact, nullable, "bytes"); !s.ok()) return s;
  if (view) {
    out->emplace(view->begin(), view->end());
  } else {
    out->reset();
  }
  return absl::OkStatus();
}

absl::Status Reader::ReadRecords(Records* out, bool compact, bool nullable) {
  // Only one of the two holds the payload (Contiguous() prefers `borrowed`).
  if (!borrow_records_) {
    out->borrowed.reset();
    return ReadNullableBytes(&out->data, compact, nullable);
  }
  out->data.reset();
  return ReadNullableView(&out->borrowed, compact, nullable, "records");
}

absl::Status Reader::ReadArrayLength(int32_t* out, bool compact, bool nullable,
                                     size_t min_element_size) {
  int64_t n;
  if (compact) {
    uint32_t v;
    if (auto s = ReadUnsignedVarint(&v); !s.ok()) return s;
    n = static_cast<int64_t>(v) - 1;
  } else {
    int32_t v;
    if (auto s = ReadInt32(&v); !s.ok()) return s;
    n = v;
  }
  if (n == -1) {
    if (!nullable) return Malformed("null array in a non-nullable field");
    *out = -1;
    return absl::OkStatus();
  }
  if (n < 0) return Malformed("negative array length " + std::to_string(n));
  if (min_element_size == 0) min_element_size = 1;
  if (static_cast<uint64_t>(n) > remaining() / min_element_size) {
    return Malformed("array of " + std::to_string(n) + " elements cannot fit in the " +
                     std::to_string(remaining()) + " bytes left");
  }
  *out = static_cast<int32_t>(n);
  return absl::OkStatus();
}

absl::Status Reader::ReadRaw(size_t n, std::span<const uint8_t>* out) {
  if (auto s = Need(n, "raw bytes"); !s.ok()) return s;
  *out = data_.subspan(pos_, n);
  pos_ += n;
  return absl::OkStatus();
}

absl::Status Reader::Skip(size_t n) {
  if (auto s = Need(n, "raw bytes"); !s.ok()) return s;
  pos_ += n;
  return absl::OkStatus();
}

// ---- Writer ----

void Writer::WriteFloat64(double v) { WriteInt64(std::bit_cast<int64_t>(v)); }

void Writer::WriteUnsignedVarint(uint32_t v) {
  while (v >= 0x80) {
    out_->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out_->push_back(static_cast<uint8_t>(v));
}

void Writer::WriteUnsignedVarlong(uint64_t v) {
  while (v >= 0x80) {
    out_->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out_->push_back(static_cast<uint8_t>(v));
}

void Writer::WriteString(std::string_view s, bool compact) {
  if (s.size() > kMaxStringLength) s = s.substr(0, kMaxStringLength);
  if (compact) {
    WriteUnsignedVarint(static_cast<uint32_t>(s.size() + 1));
  } else {
    WriteInt16(static_cast<int16_t>(s.size()));
  }
  out_->insert(out_->end(), s.begin(), s.end());
}

void Writer::WriteNullableString(const std::optional<std::string>& s, bool compact, bool nullable) {
  if (s) {
    WriteString(*s, compact);
  } else if (nullable) {
    if (compact) {
      WriteUnsignedVarint(0);
    } else {
      WriteInt16(-1);
    }
  } else {
    WriteString({}, compact);
  }
}

void Writer::WriteBytes(std::span<const uint8_t> b, bool compact) {
  if (compact) {
    WriteUnsignedVarint(static_cast<uint32_t>(b.size() + 1));
  } else {
    WriteInt32(static_cast<int32_t>(b.size()));
  }
  WriteRaw(b);
}

void Writer::WriteNullableBytes(const std::optional<Bytes>& b, bool compact, bool nullable) {
  if (b) {
    WriteBytes(*b, compact);
  } else if (nullable) {
    if (compact) {
      WriteUnsignedVarint(0);
    } else {
      WriteInt32(-1);
    }
  } else {
    WriteBytes({}, compact);
  }
}

void Writer::WriteArrayLength(size_t n, bool compact) {
  if (compact) {
    WriteUnsignedVarint(static_cast<uint32_t>(n + 1));
  } else {
    WriteInt32(static_cast<int32_t>(n));
  }
}

void Writer::WriteNullArrayLength(bool compact) {
  if (compact) {
    WriteUnsignedVarint(0);
  } else {
    WriteInt32(-1);
  }
}

void Writer::WriteFileRecords(const std::vector<FileSlice>& files, bool compact) {
  int64_t total = 0;
  for (const FileSlice& s : files) {
    if (s.file == nullptr || s.position < 0 || s.length < 0) {
      Fail(
          absl::InvalidArgumentError("records: a file slice without a file, or with a "
                                     "negative position or length"));
      return;
    }
    total += s.length;
    if (total > kMaxWideLength) {
      Fail(absl::InvalidArgumentError("records: file slices add up to more than 2^31-1 bytes"));
      return;
    }
  }
  if (compact) {
    WriteUnsignedVarint(static_cast<uint32_t>(total + 1));
  } else {
    WriteInt32(static_cast<int32_t>(total));
  }
  for (const FileSlice& s : files) {
    if (file_inserts_ != nullptr) {
      if (s.length > 0) file_inserts_->push_back(FileInsert{out_->size(), s});
    } else {
      ReadSlice(s);
    }
  }
}

void Writer::ReadSlice(const FileSlice& slice) {
  size_t start = out_->size();
  // The output keeps the size Size() promised even when a read fails (zeros then; status_
  // says the content is not valid).
  out_->resize(start + static_cast<size_t>(slice.length));
  if (!status_.ok()) return;
  int64_t done = 0;
  while (done < slice.length) {
    ssize_t n = ::pread(slice.file->fd(), out_->data() + start + done,
                        static_cast<size_t>(slice.length - done), slice.position + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Fail(absl::DataLossError("records: reading " + std::to_string(slice.length) + " bytes at " +
                               std::to_string(slice.position) + " of fd " +
                               std::to_string(slice.file->fd()) +
                               (n == 0 ? std::string(": the file ends early")
                                       : std::string(": ") + std::strerror(errno))));
      return;
    }
    done += n;
  }
}

// ---- SizeCounter ----

void SizeCounter::WriteString(std::string_view s, bool compact) {
  size_t n = std::min(s.size(), kMaxStringLength);
  size_ += (compact ? UnsignedVarintSize(static_cast<uint32_t>(n + 1)) : 2) + n;
}

void SizeCounter::WriteNullableString(const std::optional<std::string>& s, bool compact,
                                      bool nullable) {
  if (s) {
    WriteString(*s, compact);
  } else {
    size_ += compact ? 1 : 2;  // the null marker, or an empty string
  }
}

void SizeCounter::WriteBytes(std::span<const uint8_t> b, bool compact) {
  size_ += (compact ? UnsignedVarintSize(static_cast<uint32_t>(b.size() + 1)) : 4) + b.size();
}

void SizeCounter::WriteNullableBytes(const std::optional<Bytes>& b, bool compact, bool nullable) {
  if (b) {
    WriteBytes(*b, compact);
  } else {
    size_ += compact ? 1 : 4;
  }
}

void SizeCounter::WriteArrayLength(size_t n, bool compact) {
  size_ += compact ? UnsignedVarintSize(static_cast<uint32_t>(n + 1)) : 4;
}

}  // namespace runnel::protocol
