// Every file name storaged writes, in one place (Kafka's on-disk layout):
//
//   <log.dir>/<topic>-<partition>/                 one directory per partition
//       00000000000000000000.log                   segment: record batches, 20-digit base offset
//       00000000000000000000.index                 offset index of that segment
//       00000000000000000000.timeindex             time index of that segment
//       00000000000000000000.txnindex              aborted transactions of that segment
//                                                  (only once it has one; txn_index.h)
//       leader-epoch-checkpoint                    leader epoch -> start offset
//       partition.metadata                         topic id
//       <base>.log.deleted (and .index.deleted...) a segment removed by retention, unlinked later
//       <base>.log.cleaned                         compaction output being written
//       <base>.log.swap                            compaction output ready to replace segments
//   <log.dir>/<topic>-<partition>.<uuid>-delete/   a partition being deleted
//   <log.dir>/recovery-point-offset-checkpoint     per partition: offsets known flushed
//   <log.dir>/log-start-offset-checkpoint          per partition: log start offset
//   <log.dir>/cleaner-offset-checkpoint            per partition: first dirty offset
//   <log.dir>/.kafka_cleanshutdown                 present only after a clean shutdown
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace runnel::storaged {

inline constexpr std::string_view kLogSuffix = ".log";
inline constexpr std::string_view kIndexSuffix = ".index";
inline constexpr std::string_view kTimeIndexSuffix = ".timeindex";
inline constexpr std::string_view kTxnIndexSuffix = ".txnindex";
inline constexpr std::string_view kDeletedSuffix = ".deleted";
inline constexpr std::string_view kCleanedSuffix = ".cleaned";
inline constexpr std::string_view kSwapSuffix = ".swap";
// A producer state snapshot: <20-digit offset>.snapshot, the state before that offset.
inline constexpr std::string_view kProducerSnapshotSuffix = ".snapshot";
inline constexpr std::string_view kLeaderEpochCheckpoint = "leader-epoch-checkpoint";
inline constexpr std::string_view kPartitionMetadata = "partition.metadata";
inline constexpr std::string_view kRecoveryPointCheckpoint = "recovery-point-offset-checkpoint";
inline constexpr std::string_view kLogStartOffsetCheckpoint = "log-start-offset-checkpoint";
inline constexpr std::string_view kCleanerOffsetCheckpoint = "cleaner-offset-checkpoint";
inline constexpr std::string_view kCleanShutdownMarker = ".kafka_cleanshutdown";

struct TopicPartition {
  std::string topic;
  int32_t partition = 0;
  // clang-tidy 14 takes the 0 that a defaulted <=> compares with for a null pointer
  // (llvm/llvm-project#53961, fixed in clang-tidy 18).
  // NOLINTNEXTLINE(modernize-use-nullptr)
  auto operator<=>(const TopicPartition&) const = default;
  std::string ToString() const;  // "topic-3"
};

// "00000000000000000042" for 42.
std::string OffsetFileStem(int64_t base_offset);
// <dir>/<20 digits><suffix>, e.g. SegmentFilePath("/d/t-0", 42, kIndexSuffix).
std::string SegmentFilePath(const std::string& partition_dir, int64_t base_offset,
                            std::string_view suffix);
// The base offset of a file named "<20 digits><suffix>" exactly; nullopt for anything else.
std::optional<int64_t> ParseSegmentFileName(std::string_view file_name, std::string_view suffix);

// Kafka's legal topic names: 1 to 249 of [a-zA-Z0-9._-], neither "." nor "..". (So a topic
// never holds a space, which the text checkpoint formats rely on.)
bool IsValidTopicName(std::string_view topic);

// "<topic>-<partition>" (the topic may itself contain '-': the partition is after the last).
std::string PartitionDirName(const TopicPartition& tp);
// Parses a partition directory name; nullopt for anything else, including a directory
// marked for deletion.
std::optional<TopicPartition> ParsePartitionDirName(std::string_view dir_name);
// "<topic>-<partition>.<32 hex>-delete": the name a deleted partition's directory is renamed
// to before its files are removed, so a restart never loads it again.
std::string DeletedPartitionDirName(const TopicPartition& tp, std::string_view unique_hex);
bool IsDeletedPartitionDirName(std::string_view dir_name);

}  // namespace runnel::storaged
