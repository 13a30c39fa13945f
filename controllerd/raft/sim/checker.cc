#include "controllerd/raft/sim/checker.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <functional>

namespace runnel::controllerd::raft::sim {
namespace {

constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t Fnv(uint64_t hash, std::string_view bytes) {
  for (char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= kFnvPrime;
  }
  return hash;
}

uint64_t FnvInt(uint64_t hash, uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash ^= (value >> (8 * i)) & 0xff;
    hash *= kFnvPrime;
  }
  return hash;
}

uint64_t DataHash(std::string_view data) { return Fnv(SmState::kInitialHash, data); }

// Reads "key=<number>" at the front of `text` (decimal, or hex for the hash), advancing it.
bool ReadField(std::string_view& text, std::string_view key, uint64_t& value, int base) {
  if (text.substr(0, key.size()) != key) return false;
  text.remove_prefix(key.size());
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc()) return false;
  text.remove_prefix(end - text.data());
  return true;
}

}  // namespace

uint64_t ApplyHash(uint64_t hash, const Entry& entry) {
  hash = FnvInt(hash, static_cast<uint64_t>(entry.offset));
  hash = FnvInt(hash, static_cast<uint64_t>(entry.term));
  hash = FnvInt(hash, entry.data.size());
  return Fnv(hash, entry.data);
}

void SmState::Apply(const Entry& entry) {
  hash = ApplyHash(hash, entry);
  next = entry.offset + 1;
  if (!entry.data.empty()) {
    ++payloads;
    recent.push_back(entry.data);
    if (recent.size() > kRecent) recent.pop_front();
  }
}

std::string EncodeSnapshot(const SmState& state) {
  std::string out =
      fmt::format("sm next={} hash={:x} payloads={}\n", state.next, state.hash, state.payloads);
  for (const std::string& p : state.recent) {
    out += p;
    out += '\n';
  }
  return out;
}

StatusOr<SmState> DecodeSnapshot(std::string_view data) {
  SmState state;
  uint64_t next = 0, payloads = 0;
  std::string_view text = data;
  if (!ReadField(text, "sm next=", next, 10) || !ReadField(text, " hash=", state.hash, 16) ||
      !ReadField(text, " payloads=", payloads, 10) || text.empty() || text[0] != '\n') {
    return absl::DataLossError("snapshot header does not parse");
  }
  text.remove_prefix(1);
  state.next = static_cast<int64_t>(next);
  state.payloads = static_cast<int64_t>(payloads);
  while (!text.empty()) {
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return absl::DataLossError("snapshot ends mid-line");
    state.recent.emplace_back(text.substr(0, nl));
    text.remove_prefix(nl + 1);
  }
  if (state.recent.size() > SmState::kRecent) return absl::DataLossError("too many payloads");
  return state;
}

Checker::Checker(std::vector<NodeId> voters) : voters_(std::move(voters)) {
  std::sort(voters_.begin(), voters_.end());
  hashes_.push_back(SmState::kInitialHash);
}

void Checker::Fail(std::string why) {
  if (!failure_) failure_ = std::move(why);
}

bool Checker::IsVoter(NodeId node) const {
  return std::binary_search(voters_.begin(), voters_.end(), node);
}

void Checker::Committed(NodeId node, const Entry& entry, std::string_view how) {
  if (entry.offset < 0) {
    return Fail(fmt::format("node {} {} entry at offset {}", node, how, entry.offset));
  }
  if (entry.offset < committed_end()) {
    const Entry& g = committed_[entry.offset];
    if (g == entry) return;
    return Fail(fmt::format(
        "committed entry changed: node {} {} offset {} term {} data '{}', but offset {} was "
        "committed with term {} data '{}'",
        node, how, entry.offset, entry.term, entry.data, g.offset, g.term, g.data));
  }
  if (entry.offset > committed_end()) {
    return Fail(
        fmt::format("node {} {} offset {} as committed, but only offsets < {} are known "
                    "committed (a gap)",
                    node, how, entry.offset, committed_end()));
  }
  if (!committed_.empty() && entry.term < committed_.back().term) {
    return Fail(fmt::format("node {} {} offset {} of term {} after committed term {}", node, how,
                            entry.offset, entry.term, committed_.back().term));
  }
  if (!entry.data.empty()) {
    if (!proposed_.contains(entry.data)) {
      return Fail(fmt::format("node {} {} offset {} with data '{}' that no client proposed", node,
                              how, entry.offset, entry.data));
    }
    auto [it, inserted] = payload_offsets_.emplace(entry.data, entry.offset);
    if (!inserted) {
      return Fail(fmt::format("payload '{}' committed twice: offsets {} and {} (node {} {})",
                              entry.data, it->second, entry.offset, node, how));
    }
  }
  committed_.push_back(entry);
  hashes_.push_back(ApplyHash(hashes_.back(), entry));
}

void Checker::Proposed(const std::string& payload) { proposed_.insert(payload); }

std::optional<int64_t> Checker::OffsetOfPayload(const std::string& payload) const {
  auto it = payload_offsets_.find(payload);
  if (it == payload_offsets_.end()) return std::nullopt;
  return it->second;
}

void Checker::Appended(NodeId node, const Entry& entry, int64_t prev_term) {
  if (entry.term < prev_term) {
    return Fail(fmt::format("node {} appended offset {} of term {} after an entry of term {}", node,
                            entry.offset, entry.term, prev_term));
  }
  LogKey key{DataHash(entry.data), prev_term};
  auto [it, inserted] = log_entries_.emplace(std::make_pair(entry.offset, entry.term), key);
  if (inserted) return;
  if (it->second.data_hash != key.data_hash) {
    return Fail(
        fmt::format("log matching: node {} appended offset {} term {} with data '{}', "
                    "but another log has different data there in that term",
                    node, entry.offset, entry.term, entry.data));
  }
  if (it->second.prev_term != prev_term) {
    return Fail(
        fmt::format("log matching: node {} has offset {} term {} after an entry of term "
                    "{}, another log after one of term {}",
                    node, entry.offset, entry.term, prev_term, it->second.prev_term));
  }
}

void Checker::Leader(NodeId node, int64_t term) {
  if (!IsVoter(node)) {
    return Fail(fmt::format("observer {} acts as the leader of term {}", node, term));
  }
  auto [it, inserted] = leaders_.emplace(term, node);
  if (!inserted && it->second != node) {
    Fail(fmt::format("two leaders in term {}: nodes {} and {}", term, it->second, node));
  }
}

std::optional<NodeId> Checker::LeaderOf(int64_t term) const {
  auto it = leaders_.find(term);
  if (it == leaders_.end()) return std::nullopt;
  return it->second;
}

void Checker::HardStateStored(NodeId node, const HardState& before, const HardState& after) {
  if (after.term < before.term) {
    return Fail(fmt::format("node {} stored term {} over term {}", node, after.term, before.term));
  }
  if (after.term == before.term && before.voted_for != kNoNode &&
      after.voted_for != before.voted_for) {
    return Fail(fmt::format("node {} changed its vote in term {} from {} to {}", node, after.term,
                            before.voted_for, after.voted_for));
  }
  int64_t& max_term = max_terms_[node];
  if (after.term < max_term) {
    return Fail(
        fmt::format("node {} stored term {} after having stored term {} (a term went back "
                    "across a restart)",
                    node, after.term, max_term));
  }
  max_term = after.term;
  if (after.voted_for == kNoNode) return;
  if (!IsVoter(node)) {
    return Fail(
        fmt::format("observer {} voted for {} in term {}", node, after.voted_for, after.term));
  }
  auto [it, inserted] = votes_.emplace(std::make_pair(node, after.term), after.voted_for);
  if (!inserted && it->second != after.voted_for) {
    Fail(fmt::format("node {} voted twice in term {}: for {} and for {}", node, after.term,
                     it->second, after.voted_for));
  }
}

void Checker::CheckSnapshot(NodeId node, SnapshotId id, std::string_view data,
                            std::string_view where) {
  auto state = DecodeSnapshot(data);
  if (!state.ok()) {
    return Fail(fmt::format("node {} {}: snapshot {{{}, {}}}: {}", node, where, id.end_offset,
                            id.epoch, state.status().message()));
  }
  if (state->next != id.end_offset) {
    return Fail(fmt::format("node {} {}: snapshot {{{}, {}}} holds the state up to offset {}", node,
                            where, id.end_offset, id.epoch, state->next));
  }
  if (id.end_offset < 0 || id.end_offset > committed_end()) {
    return Fail(
        fmt::format("node {} {}: snapshot {{{}, {}}} covers offsets not committed (only "
                    "< {} are)",
                    node, where, id.end_offset, id.epoch, committed_end()));
  }
  int64_t epoch = id.end_offset == 0 ? 0 : committed_[id.end_offset - 1].term;
  if (id.epoch != epoch) {
    return Fail(fmt::format("node {} {}: snapshot {{{}, {}}} but committed offset {} has term {}",
                            node, where, id.end_offset, id.epoch, id.end_offset - 1, epoch));
  }
  if (state->hash != hashes_[id.end_offset]) {
    return Fail(
        fmt::format("node {} {}: snapshot {{{}, {}}} differs from the replay of the "
                    "committed log",
                    node, where, id.end_offset, id.epoch));
  }
}

void Checker::CheckDurableQuorum(std::vector<int64_t> durable_prefixes) {
  if (committed_.empty() || static_cast<int>(durable_prefixes.size()) < majority()) {
    if (!committed_.empty()) Fail("fewer durable prefixes than a majority");
    return;
  }
  std::sort(durable_prefixes.begin(), durable_prefixes.end(), std::greater<>());
  int64_t covered = durable_prefixes[majority() - 1];
  if (covered < committed_end()) {
    int holders = 0;
    for (int64_t p : durable_prefixes) holders += p > covered ? 1 : 0;
    Fail(
        fmt::format("committed offset {} (term {}) is durable on only {} of {} voters (a "
                    "majority is {})",
                    covered, committed_[covered].term, holders, voters_.size(), majority()));
  }
}

}  // namespace runnel::controllerd::raft::sim
