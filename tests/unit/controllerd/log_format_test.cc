#include "controllerd/log_format.h"

#include <gtest/gtest.h>

namespace runnel::controllerd::logformat {
namespace {

TEST(LogFormatTest, FrameRoundTrip) {
  std::string frame = EncodeFrame(42, 7, "payload");
  ASSERT_EQ(frame.size(), kHeaderSize + 7);
  // Big-endian length: 20 + 7.
  EXPECT_EQ(frame.substr(0, 4), std::string("\0\0\0\x1b", 4));
  std::string with_trailing = frame + "trailing";  // the view in `d` points into it
  Decoded d = DecodeFrame(with_trailing);
  ASSERT_EQ(d.status, DecodeStatus::kOk) << d.why;
  EXPECT_EQ(d.frame.offset, 42);
  EXPECT_EQ(d.frame.term, 7);
  EXPECT_EQ(d.frame.payload, "payload");
  EXPECT_EQ(d.frame_size, frame.size());
}

TEST(LogFormatTest, EmptyPayload) {
  std::string frame = EncodeFrame(0, 0, "");
  Decoded d = DecodeFrame(frame);
  ASSERT_EQ(d.status, DecodeStatus::kOk);
  EXPECT_EQ(d.frame.payload, "");
}

TEST(LogFormatTest, EveryPrefixIsIncomplete) {
  std::string frame = EncodeFrame(1, 1, "some payload bytes");
  for (size_t n = 0; n < frame.size(); ++n) {
    Decoded d = DecodeFrame(std::string_view(frame).substr(0, n));
    EXPECT_EQ(d.status, DecodeStatus::kIncomplete) << "prefix " << n;
    EXPECT_FALSE(d.why.empty());
  }
}

TEST(LogFormatTest, EveryFlippedByteIsCaught) {
  std::string frame = EncodeFrame(5, 2, "abcdefgh");
  for (size_t i = 0; i < frame.size(); ++i) {
    std::string bad = frame;
    bad[i] ^= 0x01;
    Decoded d = DecodeFrame(bad);
    EXPECT_NE(d.status, DecodeStatus::kOk) << "byte " << i;
  }
}

TEST(LogFormatTest, BadLengthsAreCorrupt) {
  std::string small("\0\0\0\x13", 4);  // 19 < 20
  small.append(40, '\0');
  EXPECT_EQ(DecodeFrame(small).status, DecodeStatus::kCorrupt);
  std::string huge("\xff\xff\xff\xff", 4);
  huge.append(40, '\0');
  EXPECT_EQ(DecodeFrame(huge).status, DecodeStatus::kCorrupt);
}

TEST(LogFormatTest, FileNames) {
  struct {
    int64_t offset;
    const char* name;
  } segments[] = {
      {0, "00000000000000000000.log"},
      {42, "00000000000000000042.log"},
      {INT64_MAX, "09223372036854775807.log"},
  };
  for (const auto& s : segments) {
    EXPECT_EQ(SegmentFileName(s.offset), s.name);
    EXPECT_EQ(ParseSegmentFileName(s.name), s.offset);
  }
  EXPECT_EQ(SnapshotFileName({120, 3}), "00000000000000000120-0000000003.checkpoint");
  EXPECT_EQ(ParseSnapshotFileName("00000000000000000120-0000000003.checkpoint"),
            (SnapshotId{120, 3}));
  for (const char* bad : {"0.log", "0000000000000000000a.log", "00000000000000000000.index",
                          "000000000000000000000.log", "x00000000000000000000.log"}) {
    EXPECT_FALSE(ParseSegmentFileName(bad)) << bad;
  }
  for (const char* bad :
       {"00000000000000000120_0000000003.checkpoint", "00000000000000000120-000000003.checkpoint",
        "00000000000000000120-0000000003.checkpoint.tmp", "00000000000000000120-0000000003.log"}) {
    EXPECT_FALSE(ParseSnapshotFileName(bad)) << bad;
  }
}

}  // namespace
}  // namespace runnel::controllerd::logformat
