// Length-prefixed frames on a byte stream: a 4-byte big-endian length, then that many bytes.
// The framing of storaged's append socket (proto/runnel/storage.proto, "The append stream").
//
// A frame's length is checked against the reader's bound as soon as its 4 bytes are in, so
// a reader that pops after every feed holds at most one bound's worth of a frame (and one
// feed's bytes beyond it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace runnel {

// The largest frame payload of the append stream: an AppendBatcher call's 16 MiB of record
// bytes in the message (when they cannot be shared) and its framing, with room to spare.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

// Appends the frame of `payload` (its length, then its bytes) to `*out`.
void AppendFrame(std::string_view payload, std::string* out);

class FrameReader {
 public:
  explicit FrameReader(uint32_t max_frame_bytes = kMaxFrameBytes) : max_(max_frame_bytes) {}

  // Bytes read from the stream, in order.
  void Feed(const void* data, size_t n);

  enum class Next {
    kFrame,     // *payload is the next frame's payload (valid until the next Feed or Pop)
    kNeedMore,  // no whole frame yet
    kTooLarge,  // the next frame's length is over the bound: the stream is unusable
  };
  Next Pop(std::string_view* payload);

  // Bytes fed and not yet popped as frames.
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  uint32_t max_;
  std::string buf_;
  size_t pos_ = 0;  // where the next frame starts in buf_
};

}  // namespace runnel
