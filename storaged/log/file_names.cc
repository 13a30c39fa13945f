#include "storaged/log/file_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace runnel::storaged {
namespace {

constexpr size_t kOffsetDigits = 20;
constexpr std::string_view kDeleteDirSuffix = "-delete";
constexpr size_t kDeleteDirHexDigits = 32;
// NAME_MAX of the file systems Kafka runs on; a deleted directory's name must fit in it.
constexpr size_t kMaxFileNameBytes = 255;
constexpr size_t kMaxTopicNameLength = 249;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); }

// Decimal digits only: no sign, no leading zero (so the name round-trips), fitting in T.
template <typename T>
std::optional<T> ParseCanonicalNumber(std::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  for (char c : s) {
    if (!IsDigit(c)) return std::nullopt;
  }
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

// "<topic>-<partition>", the partition after the last '-'.
std::optional<TopicPartition> ParseTopicPartition(std::string_view name) {
  size_t dash = name.rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::string_view topic = name.substr(0, dash);
  if (!IsValidTopicName(topic)) return std::nullopt;
  std::optional<int32_t> partition = ParseCanonicalNumber<int32_t>(name.substr(dash + 1));
  if (!partition) return std::nullopt;
  return TopicPartition{std::string(topic), *partition};
}

}  // namespace

bool IsValidTopicName(std::string_view topic) {
  if (topic.empty() || topic.size() > kMaxTopicNameLength || topic == "." || topic == "..") {
    return false;
  }
  for (char c : topic) {
    bool ok = IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string TopicPartition::ToString() const { return fmt::format("{}-{}", topic, partition); }

std::string OffsetFileStem(int64_t base_offset) { return fmt::format("{:020d}", base_offset); }

std::string SegmentFilePath(const std::string& partition_dir, int64_t base_offset,
                            std::string_view suffix) {
  return fmt::format("{}/{}{}", partition_dir, OffsetFileStem(base_offset), suffix);
}

std::optional<int64_t> ParseSegmentFileName(std::string_view file_name, std::string_view suffix) {
  if (file_name.size() != kOffsetDigits + suffix.size()) return std::nullopt;
  if (file_name.substr(kOffsetDigits) != suffix) return std::nullopt;
  std::string_view digits = file_name.substr(0, kOffsetDigits);
  for (char c : digits) {
    if (!IsDigit(c)) return std::nullopt;
  }
  // Leading zeros are the format here; from_chars rejects values above int64's range.
  int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::string PartitionDirName(const TopicPartition& tp) { return tp.ToString(); }

std::optional<TopicPartition> ParsePartitionDirName(std::string_view dir_name) {
  // A deleted directory ("t-0.<hex>-delete") fails here on its own: its last '-' is
  // followed by "delete", not a partition number. The same holds for Kafka's "-future"
  // and "-stray" directories.
  return ParseTopicPartition(dir_name);
}

std::string DeletedPartitionDirName(const TopicPartition& tp, std::string_view unique_hex) {
  std::string suffix = fmt::format("-{}.{}{}", tp.partition, unique_hex, kDeleteDirSuffix);
  // As Kafka does, cut a long topic so the whole name stays within the file name limit.
  size_t keep = suffix.size() < kMaxFileNameBytes
                    ? std::min(tp.topic.size(), kMaxFileNameBytes - suffix.size())
                    : tp.topic.size();
  return tp.topic.substr(0, keep) + suffix;
}

bool IsDeletedPartitionDirName(std::string_view dir_name) {
  if (dir_name.size() > kMaxFileNameBytes) return false;
  if (!dir_name.ends_with(kDeleteDirSuffix)) return false;
  std::string_view rest = dir_name.substr(0, dir_name.size() - kDeleteDirSuffix.size());
  if (rest.size() < kDeleteDirHexDigits + 1) return false;
  std::string_view hex = rest.substr(rest.size() - kDeleteDirHexDigits);
  for (char c : hex) {
    if (!IsLowerHex(c)) return false;
  }
  rest.remove_suffix(kDeleteDirHexDigits);
  if (!rest.ends_with('.')) return false;
  rest.remove_suffix(1);
  return ParseTopicPartition(rest).has_value();
}

}  // namespace runnel::storaged
