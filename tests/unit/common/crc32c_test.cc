#include "common/util/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace runnel::crc32c {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Value("123456789"), 0xE3069283u);
  EXPECT_EQ(Value(""), 0u);
  // RFC 3720 (iSCSI) B.4 test patterns.
  EXPECT_EQ(Value(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Value(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Value(ascending), 0x46DD794Eu);
  EXPECT_EQ(Value(descending), 0x113FDB5Cu);
  EXPECT_EQ(ExtendPortable(0, "123456789", 9), 0xE3069283u);
}

TEST(Crc32cTest, ExtendEqualsWholeAtEverySplit) {
  std::string data = "The quick brown fox jumps over the lazy dog, twice: the quick brown fox.";
  uint32_t whole = Value(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    uint32_t c = Extend(0, data.data(), split);
    c = Extend(c, data.data() + split, data.size() - split);
    EXPECT_EQ(c, whole) << "split at " << split;
  }
}

TEST(Crc32cTest, HardwareAndPortableAgreeOnRandomInputs) {
  std::mt19937 rng(42);
  std::vector<char> buf(4096 + 7);
  for (char& c : buf) c = static_cast<char>(rng());
  // Every length and a few misalignments, so both the 8-byte and byte loops are covered.
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t len = 0; len < 300; ++len) {
      ASSERT_EQ(Extend(0, buf.data() + offset, len), ExtendPortable(0, buf.data() + offset, len))
          << "offset " << offset << " len " << len;
    }
  }
  EXPECT_EQ(Extend(7, buf.data(), 4096), ExtendPortable(7, buf.data(), 4096));
}

// Long inputs go through three interleaved chains joined by zero-shift tables (blocks of
// 8 KiB and 256 B): lengths around every block boundary must still agree.
TEST(Crc32cTest, HardwareAndPortableAgreeOnLongInputs) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(3 * 8192 * 3 + 64);
  for (auto& b : buf) b = uint8_t(rng());
  std::vector<size_t> lengths;
  for (size_t base :
       {size_t{768}, size_t{3 * 8192}, size_t{2 * 3 * 8192}, size_t{3 * 8192 + 768}}) {
    for (size_t d = 0; d < 20; ++d) {
      lengths.push_back(base + d);
      if (base >= d) lengths.push_back(base - d);
    }
  }
  lengths.push_back(buf.size() - 8);
  for (size_t offset : {size_t{0}, size_t{3}}) {
    for (size_t len : lengths) {
      ASSERT_EQ(Extend(0, buf.data() + offset, len), ExtendPortable(0, buf.data() + offset, len))
          << "offset " << offset << " len " << len;
      ASSERT_EQ(Extend(0x12345678, buf.data() + offset, len),
                ExtendPortable(0x12345678, buf.data() + offset, len));
    }
  }
}

TEST(Crc32cTest, DetectsASingleBitFlip) {
  std::string data(1000, 'x');
  uint32_t before = Value(data);
  data[500] ^= 0x10;
  EXPECT_NE(Value(data), before);
}

}  // namespace
}  // namespace runnel::crc32c
