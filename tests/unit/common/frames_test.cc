// The append socket's framing: whole frames out of bytes fed in any pieces, and the bound.
#include "common/util/frames.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace runnel {
namespace {

std::vector<std::string> PopAll(FrameReader& reader) {
  std::vector<std::string> out;
  std::string_view payload;
  while (reader.Pop(&payload) == FrameReader::Next::kFrame) out.emplace_back(payload);
  return out;
}

TEST(FramesTest, FramesComeOutWholeHoweverTheBytesArrive) {
  const std::vector<std::string> payloads = {"a", "", std::string(70000, 'x'), "last one"};
  std::string stream;
  for (const std::string& p : payloads) AppendFrame(p, &stream);
  // Fed whole, one byte at a time, and in pieces of 3.
  for (size_t piece : {stream.size(), size_t{1}, size_t{3}}) {
    FrameReader reader;
    std::vector<std::string> got;
    for (size_t at = 0; at < stream.size(); at += piece) {
      reader.Feed(stream.data() + at, std::min(piece, stream.size() - at));
      for (std::string& p : PopAll(reader)) got.push_back(std::move(p));
    }
    EXPECT_EQ(got, payloads) << "pieces of " << piece;
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(FramesTest, TheLengthIsFourBigEndianBytes) {
  std::string out;
  AppendFrame(std::string(258, 'z'), &out);
  ASSERT_EQ(out.size(), 4u + 258u);
  EXPECT_EQ(out.substr(0, 4), std::string("\x00\x00\x01\x02", 4));
}

TEST(FramesTest, AnIncompleteFrameWaitsForTheRest) {
  std::string stream;
  AppendFrame("hello", &stream);
  FrameReader reader;
  reader.Feed(stream.data(), stream.size() - 1);
  std::string_view payload;
  EXPECT_EQ(reader.Pop(&payload), FrameReader::Next::kNeedMore);
  EXPECT_EQ(reader.buffered(), stream.size() - 1);
  reader.Feed(stream.data() + stream.size() - 1, 1);
  ASSERT_EQ(reader.Pop(&payload), FrameReader::Next::kFrame);
  EXPECT_EQ(payload, "hello");
}

TEST(FramesTest, ALengthOverTheBoundIsRefusedFromItsHeaderAlone) {
  FrameReader reader(/*max_frame_bytes=*/10);
  std::string ok, big;
  AppendFrame("0123456789", &ok);
  AppendFrame("0123456789A", &big);
  reader.Feed(ok.data(), ok.size());
  reader.Feed(big.data(), 4);  // only the header of the frame that is too long
  std::string_view payload;
  ASSERT_EQ(reader.Pop(&payload), FrameReader::Next::kFrame);
  EXPECT_EQ(payload, "0123456789");
  EXPECT_EQ(reader.Pop(&payload), FrameReader::Next::kTooLarge);
  // And it stays refused.
  EXPECT_EQ(reader.Pop(&payload), FrameReader::Next::kTooLarge);
}

}  // namespace
}  // namespace runnel
