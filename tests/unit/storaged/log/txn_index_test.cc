// A segment's transaction index (txn_index.h, aborted_txn.h): Kafka's AbortedTxn file
// format, appends, the search of a read_committed fetch, truncation and renames.
#include "storaged/log/txn_index.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;
using runnel::testing::TempDir;

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(AbortedTxnTest, EncodesKafkasThirtyFourBigEndianBytes) {
  uint8_t bytes[kAbortedTxnSize];
  EncodeAbortedTxn({0x0102030405060708, 10, 20, 21}, bytes);
  const std::vector<uint8_t> expected = {0, 0,                      // version
                                         1, 2, 3, 4, 5, 6, 7, 8,    // producer id
                                         0, 0, 0, 0, 0, 0, 0, 10,   // first offset
                                         0, 0, 0, 0, 0, 0, 0, 20,   // last offset
                                         0, 0, 0, 0, 0, 0, 0, 21};  // last stable offset
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + kAbortedTxnSize), expected);
  StatusOr<std::vector<AbortedTxn>> back = DecodeTxnIndex(expected);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0], (AbortedTxn{0x0102030405060708, 10, 20, 21}));
}

TEST(AbortedTxnTest, DamagedFilesAreRefused) {
  std::vector<uint8_t> two(2 * kAbortedTxnSize);
  EncodeAbortedTxn({1, 0, 5, 6}, two.data());
  EncodeAbortedTxn({2, 3, 9, 10}, two.data() + kAbortedTxnSize);
  ASSERT_TRUE(DecodeTxnIndex(two).ok());
  EXPECT_TRUE(DecodeTxnIndex({}).ok());
  // A torn entry, another version, last offsets not growing, an entry that is no transaction.
  std::vector<uint8_t> torn(two.begin(), two.end() - 1);
  EXPECT_EQ(DecodeTxnIndex(torn).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> version = two;
  version[kAbortedTxnSize + 1] = 1;
  EXPECT_EQ(DecodeTxnIndex(version).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> order(2 * kAbortedTxnSize);
  EncodeAbortedTxn({2, 3, 9, 10}, order.data());
  EncodeAbortedTxn({1, 0, 5, 6}, order.data() + kAbortedTxnSize);
  EXPECT_EQ(DecodeTxnIndex(order).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> inverted(kAbortedTxnSize);
  EncodeAbortedTxn({1, 9, 5, 6}, inverted.data());
  EXPECT_EQ(DecodeTxnIndex(inverted).status().code(), absl::StatusCode::kDataLoss);
}

class TxnIndexTest : public ::testing::Test {
 protected:
  std::string Path() const { return dir_.path() + "/00000000000000000000.txnindex"; }
  TempDir dir_{"txnidx"};
};

TEST_F(TxnIndexTest, TheFileIsMadeByTheFirstAbortAndReloads) {
  StatusOr<std::unique_ptr<TxnIndex>> index = TxnIndex::Open(Path());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE((*index)->empty());
  EXPECT_FALSE(fs::exists(Path()));
  ASSERT_TRUE((*index)->Append({7, 0, 4, 5}).ok());
  ASSERT_TRUE((*index)->Append({8, 2, 9, 10}).ok());
  // A marker at or before the last one's offset is refused and changes nothing.
  EXPECT_EQ((*index)->Append({9, 3, 9, 10}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadBytes(Path()).size(), 2 * kAbortedTxnSize);
  ASSERT_TRUE((*index)->Flush().ok());
  StatusOr<std::unique_ptr<TxnIndex>> again = TxnIndex::Open(Path());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->entries(), (*index)->entries());
  EXPECT_EQ((*again)->last_offset(), 9);
}

TEST_F(TxnIndexTest, CollectFindsTheOverlappingTransactionsAsKafkaDoes) {
  StatusOr<std::unique_ptr<TxnIndex>> index = TxnIndex::Open(Path());
  ASSERT_TRUE(index.ok());
  // Producer 1 aborted [0, 4] while 2's transaction from 2 went on; 2 aborted [2, 9].
  ASSERT_TRUE((*index)->Append({1, 0, 4, 2}).ok());
  ASSERT_TRUE((*index)->Append({2, 2, 9, 10}).ok());
  ASSERT_TRUE((*index)->Append({3, 11, 12, 13}).ok());
  std::vector<AbortedTxn> found;
  // From offset 5 up to 8: only 2's overlaps; the search is not complete before 2's entry
  // (its last stable offset 10 reaches the bound).
  EXPECT_TRUE((*index)->Collect(5, 8, &found));
  EXPECT_EQ(found, (std::vector<AbortedTxn>{{2, 2, 9, 10}}));
  found.clear();
  EXPECT_TRUE((*index)->Collect(0, 3, &found));
  EXPECT_EQ(found, (std::vector<AbortedTxn>{{1, 0, 4, 2}, {2, 2, 9, 10}}));
  found.clear();
  // Past the last entry's last stable offset: later segments may hold more.
  EXPECT_FALSE((*index)->Collect(10, 20, &found));
  EXPECT_EQ(found, (std::vector<AbortedTxn>{{3, 11, 12, 13}}));
}

TEST_F(TxnIndexTest, TruncationDropsLaterMarkersAndRenamesKeepTheEntries) {
  StatusOr<std::unique_ptr<TxnIndex>> index = TxnIndex::Open(Path());
  ASSERT_TRUE(index.ok());
  ASSERT_TRUE((*index)->Append({1, 0, 4, 5}).ok());
  ASSERT_TRUE((*index)->Append({2, 5, 9, 10}).ok());
  ASSERT_TRUE((*index)->TruncateTo(9).ok());
  EXPECT_EQ((*index)->entries(), (std::vector<AbortedTxn>{{1, 0, 4, 5}}));
  EXPECT_EQ(ReadBytes(Path()).size(), kAbortedTxnSize);
  const std::string moved = Path() + ".deleted";
  ASSERT_TRUE((*index)->RenameTo(moved).ok());
  EXPECT_FALSE(fs::exists(Path()));
  EXPECT_EQ(ReadBytes(moved).size(), kAbortedTxnSize);
  ASSERT_TRUE((*index)->TruncateTo(0).ok());
  EXPECT_TRUE((*index)->empty());
  EXPECT_FALSE(fs::exists(moved));
  ASSERT_TRUE((*index)->Append({3, 1, 2, 3}).ok());
  ASSERT_TRUE((*index)->Delete().ok());
  EXPECT_FALSE(fs::exists(moved));
}

TEST_F(TxnIndexTest, ADamagedFileIsDataLoss) {
  {
    std::ofstream out(Path(), std::ios::binary);
    out << "not an index";
  }
  EXPECT_EQ(TxnIndex::Open(Path()).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace runnel::storaged
