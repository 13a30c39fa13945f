// The four codecs of Kafka record batches, with the framing Kafka clients write:
//   gzip    a gzip stream (RFC 1952), as java.util.zip.GZIPOutputStream writes it; several
//           members back to back are read as one stream, as GZIPInputStream does.
//   snappy  Java's xerial SnappyOutputStream framing: magic "\x82SNAPPY\0", int32 version,
//           int32 compatible version, then [int32 BE compressed length][raw snappy block]...
//           librdkafka and other clients send one raw snappy block instead: both are read.
//   lz4     an LZ4 frame (with the correct header checksum: only magic 0/1 had Kafka's broken
//           one, and this code reads magic 2 only).
//   zstd    one or more zstd frames; the content size may be absent (Java streams it).
//
// Decompression never trusts a size the input declares: output grows geometrically, capped at
// max_output + 1 bytes, so a bomb fails with kResourceExhausted having allocated at most about
// max_output; zstd's window is capped too (see DecompressZstd).
#include <fmt/format.h>
#include <lz4frame.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <limits>
#include <memory>

#include "common/record/batch.h"
#include "common/util/big_endian.h"

namespace runnel::record {
namespace {

constexpr uint8_t kXerialMagic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
constexpr size_t kXerialHeaderSize = 16;  // magic, int32 version, int32 compatible version
constexpr int32_t kXerialVersion = 1;
// SnappyOutputStream's default block size, which Kafka's Java producer uses.
constexpr size_t kXerialBlockSize = size_t{32} * 1024;

Status TooLarge(const char* codec, size_t max_output) {
  return absl::ResourceExhaustedError(
      fmt::format("{} payload decompresses to more than {} bytes", codec, max_output));
}

// An output buffer that grows by doubling up to max_output + 1 bytes: reaching that size proves
// the output is too large without ever holding more.
class BoundedOutput {
 public:
  BoundedOutput(size_t input_size, size_t max_output)
      : max_output_(max_output),
        limit_(max_output == std::numeric_limits<size_t>::max() ? max_output : max_output + 1) {
    // A guess that fits typical ratios; growth covers the rest.
    size_t initial = std::max<size_t>(input_size, 1024);
    initial = initial > limit_ / 4 ? limit_ : initial * 4;
    buffer_.reserve(std::min(initial, limit_));
    buffer_.resize(std::min(initial, limit_));
  }

  // Where the next bytes go; grows first when full. False when already at the limit.
  bool Room(uint8_t** at, size_t* n) {
    if (used_ == buffer_.size()) {
      if (buffer_.size() >= limit_) return false;
      const size_t grown =
          std::max<size_t>(buffer_.size() > limit_ / 2 ? limit_ : buffer_.size() * 2, 1);
      buffer_.reserve(grown);  // exactly: resize alone may round the capacity up past limit_
      buffer_.resize(grown);
    }
    *at = buffer_.data() + used_;
    *n = buffer_.size() - used_;
    return true;
  }
  void Advance(size_t n) { used_ += n; }
  bool over_limit() const { return used_ > max_output_; }
  size_t used() const { return used_; }

  std::vector<uint8_t> Take() && {
    buffer_.resize(used_);
    buffer_.shrink_to_fit();
    return std::move(buffer_);
  }

 private:
  size_t max_output_;
  size_t limit_;
  std::vector<uint8_t> buffer_;
  size_t used_ = 0;
};

void PutBE32(std::vector<uint8_t>* out, uint32_t v) {
  uint8_t b[4];
  StoreBigEndian32(b, v);
  out->insert(out->end(), b, b + 4);
}

// ---- gzip ----

StatusOr<std::vector<uint8_t>> DecompressGzip(ByteSpan input, size_t max_output) {
  if (input.size() > std::numeric_limits<uInt>::max()) {
    return absl::InvalidArgumentError("gzip input too large");
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return absl::InternalError("inflateInit2 failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  zs.next_in = const_cast<Bytef*>(input.data());
  zs.avail_in = static_cast<uInt>(input.size());
  BoundedOutput out(input.size(), max_output);
  // Each round consumes input, produces output or grows the buffer; Z_BUF_ERROR otherwise.
  while (true) {
    uint8_t* at = nullptr;
    size_t room = 0;
    if (!out.Room(&at, &room)) return TooLarge("gzip", max_output);
    zs.next_out = at;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(room, std::numeric_limits<uInt>::max()));
    const uInt offered = zs.avail_out;
    const int ret = inflate(&zs, Z_NO_FLUSH);
    out.Advance(offered - zs.avail_out);
    if (out.over_limit()) return TooLarge("gzip", max_output);
    if (ret == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // Another gzip member follows (GZIPInputStream reads them as one stream).
      if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
        if (inflateReset(&zs) != Z_OK) return absl::InternalError("inflateReset failed");
        continue;
      }
      return absl::DataLossError(
          fmt::format("{} bytes after the end of the gzip stream", zs.avail_in));
    }
    if (ret == Z_BUF_ERROR && zs.avail_out == 0) continue;  // needs more room
    if (ret == Z_BUF_ERROR) return absl::DataLossError("gzip stream truncated");
    if (ret != Z_OK) {
      return absl::DataLossError(
          fmt::format("gzip stream is corrupt: {}", zs.msg != nullptr ? zs.msg : "error"));
    }
  }
  return std::move(out).Take();
}

StatusOr<std::vector<uint8_t>> CompressGzip(ByteSpan input) {
  if (input.size() > std::numeric_limits<uInt>::max() / 2) {
    return absl::InvalidArgumentError("gzip input too large");
  }
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return absl::InternalError("deflateInit2 failed");
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, deflateEnd);
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(input.size())));
  zs.next_in = const_cast<Bytef*>(input.data());
  zs.avail_in = static_cast<uInt>(input.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) return absl::InternalError("deflate failed");
  out.resize(zs.total_out);
  return out;
}

// ---- snappy ----

StatusOr<std::vector<uint8_t>> DecompressSnappy(ByteSpan input, size_t max_output) {
  const char* in = reinterpret_cast<const char*>(input.data());
  if (input.size() < kXerialHeaderSize ||
      std::memcmp(input.data(), kXerialMagic, sizeof(kXerialMagic)) != 0) {
    size_t length = 0;
    if (!snappy::GetUncompressedLength(in, input.size(), &length)) {
      return absl::DataLossError("snappy block is corrupt (bad length preamble)");
    }
    if (length > max_output) return TooLarge("snappy", max_output);
    std::vector<uint8_t> out(length);
    if (!snappy::RawUncompress(in, input.size(), reinterpret_cast<char*>(out.data()))) {
      return absl::DataLossError("snappy block is corrupt");
    }
    return out;
  }
  std::vector<uint8_t> out;
  size_t pos = kXerialHeaderSize;
  // Each round consumes at least the 4-byte chunk length.
  while (pos < input.size()) {
    if (input.size() - pos < 4) return absl::DataLossError("xerial snappy chunk length truncated");
    const uint32_t length = LoadBigEndian32(input.data() + pos);
    pos += 4;
    if (length > input.size() - pos) {
      return absl::DataLossError(
          fmt::format("xerial snappy chunk of {} bytes runs past the end", length));
    }
    size_t chunk_out = 0;
    if (!snappy::GetUncompressedLength(in + pos, length, &chunk_out)) {
      return absl::DataLossError("xerial snappy chunk is corrupt (bad length preamble)");
    }
    if (chunk_out > max_output - out.size()) return TooLarge("snappy", max_output);
    const size_t old_size = out.size();
    if (old_size + chunk_out > out.capacity()) {
      out.reserve(std::min(std::max(old_size + chunk_out, 2 * out.capacity()), max_output));
    }
    out.resize(old_size + chunk_out);
    if (!snappy::RawUncompress(in + pos, length, reinterpret_cast<char*>(out.data() + old_size))) {
      return absl::DataLossError("xerial snappy chunk is corrupt");
    }
    pos += length;
  }
  return out;
}

std::vector<uint8_t> CompressSnappyXerial(ByteSpan input) {
  std::vector<uint8_t> out(kXerialMagic, kXerialMagic + sizeof(kXerialMagic));
  PutBE32(&out, kXerialVersion);
  PutBE32(&out, kXerialVersion);  // compatible version
  for (size_t pos = 0; pos < input.size(); pos += kXerialBlockSize) {
    const size_t n = std::min(kXerialBlockSize, input.size() - pos);
    const size_t length_at = out.size();
    out.resize(length_at + 4 + snappy::MaxCompressedLength(n));
    size_t written = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(input.data() + pos), n,
                        reinterpret_cast<char*>(out.data() + length_at + 4), &written);
    out.resize(length_at + 4 + written);
    StoreBigEndian32(&out[length_at], static_cast<uint32_t>(written));
  }
  return out;
}

// ---- lz4 ----

StatusOr<std::vector<uint8_t>> DecompressLz4(ByteSpan input, size_t max_output) {
  LZ4F_dctx* raw = nullptr;
  if (LZ4F_isError(LZ4F_createDecompressionContext(&raw, LZ4F_VERSION))) {
    return absl::InternalError("LZ4F_createDecompressionContext failed");
  }
  std::unique_ptr<LZ4F_dctx, LZ4F_errorCode_t (*)(LZ4F_dctx*)> dctx(raw,
                                                                    LZ4F_freeDecompressionContext);
  BoundedOutput out(input.size(), max_output);
  size_t pos = 0;
  // Each round must consume input or produce output (or grow the buffer), so it ends.
  while (true) {
    uint8_t* at = nullptr;
    size_t room = 0;
    if (!out.Room(&at, &room)) return TooLarge("lz4", max_output);
    size_t produced = room;
    size_t consumed = input.size() - pos;
    const size_t hint =
        LZ4F_decompress(dctx.get(), at, &produced, input.data() + pos, &consumed, nullptr);
    if (LZ4F_isError(hint)) {
      return absl::DataLossError(fmt::format("lz4 frame is corrupt: {}", LZ4F_getErrorName(hint)));
    }
    pos += consumed;
    out.Advance(produced);
    if (out.over_limit()) return TooLarge("lz4", max_output);
    if (hint == 0) {  // the frame is complete
      if (pos != input.size()) {
        return absl::DataLossError(
            fmt::format("{} bytes after the end of the lz4 frame", input.size() - pos));
      }
      break;
    }
    if (consumed == 0 && produced == 0) {
      return absl::DataLossError(pos == input.size() ? "lz4 frame truncated"
                                                     : "lz4 frame makes no progress");
    }
  }
  return std::move(out).Take();
}

StatusOr<std::vector<uint8_t>> CompressLz4(ByteSpan input) {
  // What Kafka's Java KafkaLZ4BlockOutputStream writes: 64 KiB independent blocks, no
  // checksums beyond the header's.
  LZ4F_preferences_t prefs;
  std::memset(&prefs, 0, sizeof(prefs));
  prefs.frameInfo.blockSizeID = LZ4F_max64KB;
  prefs.frameInfo.blockMode = LZ4F_blockIndependent;
  std::vector<uint8_t> out(LZ4F_compressFrameBound(input.size(), &prefs));
  const size_t n = LZ4F_compressFrame(out.data(), out.size(), input.data(), input.size(), &prefs);
  if (LZ4F_isError(n)) {
    return absl::InternalError(fmt::format("lz4 compression failed: {}", LZ4F_getErrorName(n)));
  }
  out.resize(n);
  return out;
}

// ---- zstd ----

// Producers stream zstd without a content size (Java's ZstdOutputStream) at level 3, whose
// window is 2^21; levels up to 19 use 2^23. A declared window beyond
// max(2^23, max_output) is refused before zstd allocates it.
constexpr int kZstdMinWindowLogMax = 23;
// zstd's own default limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT, in its static-only API).
constexpr int kZstdMaxWindowLogMax = 27;

StatusOr<std::vector<uint8_t>> DecompressZstd(ByteSpan input, size_t max_output) {
  if (input.empty()) return absl::DataLossError("zstd payload is empty");
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (dctx == nullptr) return absl::InternalError("ZSTD_createDCtx failed");

  // One frame that states its size: decode straight into a buffer of exactly that size.
  const unsigned long long content = ZSTD_getFrameContentSize(input.data(), input.size());
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != ZSTD_CONTENTSIZE_ERROR &&
      ZSTD_findFrameCompressedSize(input.data(), input.size()) == input.size()) {
    if (content > max_output) return TooLarge("zstd", max_output);
    std::vector<uint8_t> out(static_cast<size_t>(content));
    const size_t n =
        ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), input.data(), input.size());
    if (ZSTD_isError(n)) {
      return absl::DataLossError(fmt::format("zstd frame is corrupt: {}", ZSTD_getErrorName(n)));
    }
    if (n != out.size()) return absl::DataLossError("zstd frame is shorter than it declares");
    return out;
  }

  const int window_log_max =
      std::clamp<int>(static_cast<int>(std::bit_width(std::max<size_t>(max_output, 1) - 1)),
                      kZstdMinWindowLogMax, kZstdMaxWindowLogMax);
  if (ZSTD_isError(ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, window_log_max))) {
    return absl::InternalError("ZSTD_DCtx_setParameter failed");
  }
  ZSTD_inBuffer in{input.data(), input.size(), 0};
  BoundedOutput out(input.size(), max_output);
  // Each round consumes input or produces output (or grows the buffer), so it ends.
  while (true) {
    uint8_t* at = nullptr;
    size_t room = 0;
    if (!out.Room(&at, &room)) return TooLarge("zstd", max_output);
    ZSTD_outBuffer zout{at, room, 0};
    const size_t in_before = in.pos;
    const size_t ret = ZSTD_decompressStream(dctx.get(), &zout, &in);
    if (ZSTD_isError(ret)) {
      return absl::DataLossError(fmt::format("zstd frame is corrupt: {}", ZSTD_getErrorName(ret)));
    }
    out.Advance(zout.pos);
    if (out.over_limit()) return TooLarge("zstd", max_output);
    if (ret == 0 && in.pos == in.size) break;  // last frame complete and flushed
    if (in.pos == in.size && zout.pos < zout.size) {
      return absl::DataLossError("zstd frame truncated");
    }
    if (in.pos == in_before && zout.pos == 0) {
      return absl::DataLossError("zstd frame makes no progress");
    }
  }
  return std::move(out).Take();
}

StatusOr<std::vector<uint8_t>> CompressZstd(ByteSpan input) {
  std::vector<uint8_t> out(ZSTD_compressBound(input.size()));
  const size_t n = ZSTD_compress(out.data(), out.size(), input.data(), input.size(), 3);
  if (ZSTD_isError(n)) {
    return absl::InternalError(fmt::format("zstd compression failed: {}", ZSTD_getErrorName(n)));
  }
  out.resize(n);
  return out;
}

}  // namespace

StatusOr<std::vector<uint8_t>> Decompress(Compression codec, ByteSpan input, size_t max_output) {
  switch (codec) {
    case Compression::kNone:
      if (input.size() > max_output) return TooLarge("uncompressed", max_output);
      return std::vector<uint8_t>(input.begin(), input.end());
    case Compression::kGzip:
      return DecompressGzip(input, max_output);
    case Compression::kSnappy:
      return DecompressSnappy(input, max_output);
    case Compression::kLz4:
      return DecompressLz4(input, max_output);
    case Compression::kZstd:
      return DecompressZstd(input, max_output);
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown compression codec {}", static_cast<int>(codec)));
}

StatusOr<std::vector<uint8_t>> Compress(Compression codec, ByteSpan input) {
  switch (codec) {
    case Compression::kNone:
      return std::vector<uint8_t>(input.begin(), input.end());
    case Compression::kGzip:
      return CompressGzip(input);
    case Compression::kSnappy:
      return CompressSnappyXerial(input);
    case Compression::kLz4:
      return CompressLz4(input);
    case Compression::kZstd:
      return CompressZstd(input);
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown compression codec {}", static_cast<int>(codec)));
}

}  // namespace runnel::record
