// DescribeLogDirs (key 35), v1-v5 (v0 is not served, as in Kafka 4): every log directory
// of this node, with the partitions asked (null topics: all) that it holds, their size,
// offset lag 0 and is_future false (no replica moves between directories yet), and from v4
// the file system's total and usable bytes; v5's IsCordoned (KIP-1066, a directory taking no
// new partitions) is false: directories are never cordoned here.
//
// Two storaged calls run side by side: DescribeLogDirs for the directories, and
// GetPartitionStates for the partitions' sizes and directories (a partition directory's
// parent is its log directory). A directory storaged reports an error for, or every
// configured one when storaged cannot answer, is KAFKA_STORAGE_ERROR, as Kafka answers for
// an offline directory.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::DescribeLogDirsRequest;
using protocol::DescribeLogDirsResponse;
using protocol::ErrorCode;

constexpr std::chrono::milliseconds kStorageTimeout{15000};

std::string NormalPath(const std::string& path) {
  std::string out = std::filesystem::path(path).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

struct Pending {
  BrokerContext* broker = nullptr;
  std::unique_ptr<RequestContext> ctx;
  Respond respond;
  // null: every partition; else the partitions asked, by topic.
  std::optional<std::map<std::string, std::set<int32_t>>> wanted;
  int outstanding = 2;
  std::optional<storage::DescribeLogDirsResponse> dirs;
  std::optional<storage::GetPartitionStatesResponse> states;

  bool Wants(const std::string& topic, int32_t partition) const {
    if (!wanted) return true;
    auto it = wanted->find(topic);
    return it != wanted->end() && it->second.count(partition) > 0;
  }

  void Done() {
    if (--outstanding > 0) return;
    DescribeLogDirsResponse resp;
    if (!dirs || !states) {
      // storaged is down or failing: every configured directory is offline to the client.
      for (const std::string& dir : broker->config.GetList("log.dirs")) {
        DescribeLogDirsResponse::DescribeLogDirsResult& r = resp.results.emplace_back();
        std::error_code ec;
        std::filesystem::path path = std::filesystem::absolute(dir, ec);
        r.log_dir = NormalPath(ec ? dir : path.string());
        r.error_code = ErrorCode::kKafkaStorageError;
      }
      return respond(EncodeResponse(*ctx, resp));
    }
    // Partitions by log directory, then by topic (GetPartitionStates lists them in
    // topic-partition order).
    std::map<std::string, std::map<std::string, std::vector<const storage::PartitionState*>>>
        by_dir;
    for (const storage::PartitionState& s : states->partitions()) {
      if (s.deleted() || !Wants(s.topic(), s.partition())) continue;
      std::string dir = NormalPath(std::filesystem::path(NormalPath(s.dir())).parent_path());
      by_dir[dir][s.topic()].push_back(&s);
    }
    for (const storage::LogDir& d : dirs->dirs()) {
      DescribeLogDirsResponse::DescribeLogDirsResult& r = resp.results.emplace_back();
      r.log_dir = d.path();
      if (!d.error().empty()) {
        r.error_code = ErrorCode::kKafkaStorageError;
        continue;
      }
      r.total_bytes = d.total_bytes();
      r.usable_bytes = d.usable_bytes();
      auto held = by_dir.find(NormalPath(d.path()));
      if (held == by_dir.end()) continue;
      for (const auto& [topic, partitions] : held->second) {
        DescribeLogDirsResponse::DescribeLogDirsTopic& t = r.topics.emplace_back();
        t.name = topic;
        for (const storage::PartitionState* s : partitions) {
          DescribeLogDirsResponse::DescribeLogDirsPartition& p = t.partitions.emplace_back();
          p.partition_index = s->partition();
          p.partition_size = s->size_bytes();
          p.offset_lag = 0;
          p.is_future_key = false;
        }
      }
    }
    respond(EncodeResponse(*ctx, resp));
  }
};

}  // namespace

void HandleDescribeLogDirs(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                           Respond respond) {
  DescribeLogDirsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  auto pending = std::make_shared<Pending>();
  pending->broker = &broker;
  storage::GetPartitionStatesRequest states_req;
  if (req.topics) {
    pending->wanted.emplace();
    for (const auto& topic : *req.topics) {
      auto& partitions = (*pending->wanted)[topic.topic];
      partitions.insert(topic.partitions.begin(), topic.partitions.end());
    }
    // Nothing asked: no partition is listed, but the directories still are.
    if (pending->wanted->empty()) {
      states_req.add_topics("");
    } else {
      for (const auto& [topic, partitions] : *pending->wanted) states_req.add_topics(topic);
    }
  }
  pending->ctx = std::move(ctx);
  pending->respond = std::move(respond);

  broker.storage.DescribeLogDirs(
      kStorageTimeout,
      [pending](const grpc::Status& status, storage::DescribeLogDirsResponse& result) {
        if (status.ok()) {
          pending->dirs = std::move(result);
        } else {
          KafkaLog()->warn("DescribeLogDirs: storaged's DescribeLogDirs failed: {}",
                           status.error_message());
        }
        pending->Done();
      });
  broker.storage.GetPartitionStates(
      std::move(states_req), kStorageTimeout,
      [pending](const grpc::Status& status, storage::GetPartitionStatesResponse& result) {
        if (status.ok()) {
          pending->states = std::move(result);
        } else {
          KafkaLog()->warn("DescribeLogDirs: storaged's GetPartitionStates failed: {}",
                           status.error_message());
        }
        pending->Done();
      });
}

}  // namespace runnel::brokerd
