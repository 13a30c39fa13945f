#include "storaged/log/checkpoints.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <iterator>
#include <string_view>
#include <utility>

#include "common/protocol/uuid.h"
#include "storaged/log_dirs.h"

namespace runnel::storaged {
namespace {

constexpr std::string_view kCheckpointVersion = "0";

// Lines of `text`; the newline ending the last line is optional.
std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) {
      lines.push_back(text);
      break;
    }
    lines.push_back(text.substr(0, nl));
    text.remove_prefix(nl + 1);
  }
  return lines;
}

// Fields separated by runs of spaces or tabs (as Kafka splits them).
std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

template <typename T>
std::optional<T> ParseInt(std::string_view s) {
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

Status LineError(const std::string& path, size_t line_no, std::string_view what) {
  return absl::DataLossError(fmt::format("{}:{}: {}", path, line_no, what));
}

// Parses Kafka's checkpoint layout: a version line, an entry count line, then that many
// lines of `fields` fields each, handed to `on_entry` in order. An error `on_entry` returns
// is reported as DataLoss at that line.
Status ParseCheckpoint(
    const std::string& path, std::string_view text, size_t fields,
    const std::function<Status(const std::vector<std::string_view>&)>& on_entry) {
  std::vector<std::string_view> lines = SplitLines(text);
  if (lines.empty()) return LineError(path, 1, "empty file, expected the version line");
  if (lines[0] != kCheckpointVersion) {
    return LineError(
        path, 1,
        fmt::format("unsupported version '{}', expected {}", lines[0], kCheckpointVersion));
  }
  if (lines.size() < 2) return LineError(path, 2, "missing the entry count line");
  std::optional<int32_t> count = ParseInt<int32_t>(lines[1]);
  if (!count || *count < 0) {
    return LineError(path, 2, fmt::format("bad entry count '{}'", lines[1]));
  }
  size_t found = lines.size() - 2;
  if (found != static_cast<size_t>(*count)) {
    return LineError(path, 2,
                     fmt::format("the entry count is {} but {} entry lines follow", *count, found));
  }
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string_view> f = SplitFields(lines[i]);
    if (f.size() != fields) {
      return LineError(path, i + 1, fmt::format("expected {} fields, got '{}'", fields, lines[i]));
    }
    Status s = on_entry(f);
    if (!s.ok()) return LineError(path, i + 1, std::string(s.message().data(), s.message().size()));
  }
  return absl::OkStatus();
}

bool EpochEntryFollows(const EpochEntry& prev, const EpochEntry& next) {
  return next.epoch > prev.epoch && next.start_offset > prev.start_offset;
}

}  // namespace

StatusOr<std::optional<std::string>> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return absl::InternalError(fmt::format("open {}: {}", path, std::strerror(errno)));
  }
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = absl::InternalError(fmt::format("read {}: {}", path, std::strerror(errno)));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return std::optional<std::string>(std::move(out));
}

// ---------------------------------------------------------------- OffsetCheckpointFile

StatusOr<std::map<TopicPartition, int64_t>> OffsetCheckpointFile::Read() const {
  RUNNEL_ASSIGN_OR_RETURN(std::optional<std::string> text, ReadWholeFile(path_));
  std::map<TopicPartition, int64_t> out;
  if (!text) return out;
  RUNNEL_RETURN_IF_ERROR(
      ParseCheckpoint(path_, *text, 3, [&](const std::vector<std::string_view>& f) -> Status {
        if (!IsValidTopicName(f[0])) {
          return absl::InvalidArgumentError(fmt::format("invalid topic name '{}'", f[0]));
        }
        std::optional<int32_t> partition = ParseInt<int32_t>(f[1]);
        if (!partition || *partition < 0) {
          return absl::InvalidArgumentError(fmt::format("bad partition '{}'", f[1]));
        }
        std::optional<int64_t> offset = ParseInt<int64_t>(f[2]);
        if (!offset) return absl::InvalidArgumentError(fmt::format("bad offset '{}'", f[2]));
        TopicPartition tp{std::string(f[0]), *partition};
        if (!out.emplace(tp, *offset).second) {
          return absl::InvalidArgumentError(fmt::format("{} appears twice", tp.ToString()));
        }
        return absl::OkStatus();
      }));
  return out;
}

Status OffsetCheckpointFile::Write(const std::map<TopicPartition, int64_t>& offsets) const {
  std::string text = fmt::format("{}\n{}\n", kCheckpointVersion, offsets.size());
  for (const auto& [tp, offset] : offsets) {
    // A space or newline in a topic would make the file unreadable; Kafka's topic names
    // cannot hold one, so such a name is a bug upstream.
    if (!IsValidTopicName(tp.topic) || tp.partition < 0) {
      return absl::InvalidArgumentError(
          fmt::format("{}: cannot checkpoint invalid partition '{}'", path_, tp.ToString()));
    }
    text += fmt::format("{} {} {}\n", tp.topic, tp.partition, offset);
  }
  return WriteFileDurably(path_, text);
}

// ---------------------------------------------------------------- LeaderEpochCache

StatusOr<LeaderEpochCache> LeaderEpochCache::Load(const std::string& path) {
  LeaderEpochCache cache;
  cache.path_ = path;
  RUNNEL_ASSIGN_OR_RETURN(std::optional<std::string> text, ReadWholeFile(path));
  if (!text) return cache;
  std::vector<EpochEntry> entries;
  RUNNEL_RETURN_IF_ERROR(
      ParseCheckpoint(path, *text, 2, [&](const std::vector<std::string_view>& f) -> Status {
        std::optional<int32_t> epoch = ParseInt<int32_t>(f[0]);
        std::optional<int64_t> start = ParseInt<int64_t>(f[1]);
        if (!epoch || *epoch < 0 || !start || *start < 0) {
          return absl::InvalidArgumentError(
              fmt::format("bad entry '{} {}', expected 'epoch startOffset'", f[0], f[1]));
        }
        EpochEntry e{*epoch, *start};
        if (!entries.empty() && !EpochEntryFollows(entries.back(), e)) {
          return absl::InvalidArgumentError(fmt::format(
              "epoch {} at offset {} does not follow epoch {} at offset {} (both must rise)",
              e.epoch, e.start_offset, entries.back().epoch, entries.back().start_offset));
        }
        entries.push_back(e);
        return absl::OkStatus();
      }));
  cache.history_ = EpochHistory(std::move(entries));
  return cache;
}

template <typename Change>
Status LeaderEpochCache::Apply(Change change) {
  EpochHistory before = history_;
  if (!change(history_)) return absl::OkStatus();
  Status s = Persist();
  if (!s.ok()) history_ = std::move(before);
  return s;
}

Status LeaderEpochCache::Assign(int32_t epoch, int64_t start_offset) {
  if (epoch < 0 || start_offset < 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: cannot assign epoch {} at offset {}", path_, epoch, start_offset));
  }
  return Apply([&](EpochHistory& h) { return h.Assign(epoch, start_offset); });
}

Status LeaderEpochCache::TruncateFromEnd(int64_t end_offset) {
  return Apply([&](EpochHistory& h) { return h.TruncateFromEnd(end_offset); });
}

Status LeaderEpochCache::TruncateFromStart(int64_t start_offset) {
  return Apply([&](EpochHistory& h) { return h.TruncateFromStart(start_offset); });
}

Status LeaderEpochCache::Reset(std::vector<EpochEntry> entries) {
  for (size_t i = 0; i < entries.size(); ++i) {
    const EpochEntry& e = entries[i];
    if (e.epoch < 0 || e.start_offset < 0 || (i > 0 && !EpochEntryFollows(entries[i - 1], e))) {
      return absl::InvalidArgumentError(
          fmt::format("{}: entry {} (epoch {} at offset {}) breaks the rising order", path_, i,
                      e.epoch, e.start_offset));
    }
  }
  EpochHistory before = std::exchange(history_, EpochHistory(std::move(entries)));
  Status s = Persist();
  if (!s.ok()) history_ = std::move(before);
  return s;
}

Status LeaderEpochCache::Persist() const {
  std::string text = fmt::format("{}\n{}\n", kCheckpointVersion, history_.entries().size());
  for (const EpochEntry& e : history_.entries()) {
    text += fmt::format("{} {}\n", e.epoch, e.start_offset);
  }
  return WriteFileDurably(path_, text);
}

// ---------------------------------------------------------------- partition.metadata

StatusOr<std::string> ReadPartitionMetadata(const std::string& path) {
  RUNNEL_ASSIGN_OR_RETURN(std::optional<std::string> text, ReadWholeFile(path));
  if (!text) return absl::NotFoundError(fmt::format("{} does not exist", path));
  std::vector<std::string_view> lines = SplitLines(*text);
  // "key: value", the value after the colon and its spaces.
  auto value_of = [&](size_t i, std::string_view key) -> std::optional<std::string_view> {
    if (i >= lines.size()) return std::nullopt;
    std::string_view line = lines[i];
    if (!line.starts_with(key) || line.substr(key.size(), 1) != ":") return std::nullopt;
    line.remove_prefix(key.size() + 1);
    size_t start = line.find_first_not_of(" \t");
    if (start == 0 || start == std::string_view::npos) return std::nullopt;
    return line.substr(start);
  };
  std::optional<std::string_view> version = value_of(0, "version");
  if (!version || *version != kCheckpointVersion) {
    return LineError(path, 1, "expected 'version: 0'");
  }
  std::optional<std::string_view> id = value_of(1, "topic_id");
  if (!id || !protocol::Uuid::FromString(*id)) {
    return LineError(path, 2, "expected 'topic_id: <22-character base64 topic id>'");
  }
  for (size_t i = 2; i < lines.size(); ++i) {
    if (!lines[i].empty()) return LineError(path, i + 1, "unexpected line after the topic id");
  }
  return std::string(*id);
}

Status WritePartitionMetadata(const std::string& path, const std::string& topic_id_base64,
                              bool durable) {
  if (!protocol::Uuid::FromString(topic_id_base64)) {
    return absl::InvalidArgumentError(
        fmt::format("{}: '{}' is not a base64 topic id", path, topic_id_base64));
  }
  std::string text =
      fmt::format("version: {}\ntopic_id: {}\n", kCheckpointVersion, topic_id_base64);
  return durable ? WriteFileDurably(path, text) : WriteNewFile(path, text);
}

}  // namespace runnel::storaged
