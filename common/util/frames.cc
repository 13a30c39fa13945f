#include "common/util/frames.h"

#include "common/util/big_endian.h"

namespace runnel {
namespace {

constexpr size_t kHeaderBytes = 4;

}  // namespace

void AppendFrame(std::string_view payload, std::string* out) {
  const auto n = static_cast<uint32_t>(payload.size());
  uint8_t header[kHeaderBytes];
  StoreBigEndian32(header, n);
  out->append(reinterpret_cast<const char*>(header), kHeaderBytes);
  out->append(payload);
}

void FrameReader::Feed(const void* data, size_t n) {
  if (pos_ > 0) {
    // What was popped goes before anything is added, so the buffer holds at most the
    // frame being read (and what came after it in the same read).
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(static_cast<const char*>(data), n);
}

FrameReader::Next FrameReader::Pop(std::string_view* payload) {
  if (buffered() < kHeaderBytes) return Next::kNeedMore;
  const auto* h = reinterpret_cast<const uint8_t*>(buf_.data() + pos_);
  const uint32_t n = LoadBigEndian32(h);
  if (n > max_) return Next::kTooLarge;
  if (buffered() - kHeaderBytes < n) return Next::kNeedMore;
  *payload = std::string_view(buf_.data() + pos_ + kHeaderBytes, n);
  pos_ += kHeaderBytes + n;
  return Next::kFrame;
}

}  // namespace runnel
