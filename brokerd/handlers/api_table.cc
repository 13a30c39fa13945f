// The APIs Runnel serves, each with the versions it really handles. A version is declared
// here once: dispatch and the ApiVersions answer both read this table.
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

using protocol::ApiKey;

std::span<const ApiEntry> SupportedApis() {
  static const ApiEntry kApis[] = {
      {ApiKey::kProduce, 0, 13, &HandleProduce},
      {ApiKey::kFetch, 4, 18, &HandleFetch},
      {ApiKey::kListOffsets, 1, 11, &HandleListOffsets},
      {ApiKey::kDeleteRecords, 0, 2, &HandleDeleteRecords},
      {ApiKey::kDescribeLogDirs, 1, 5, &HandleDescribeLogDirs},
      {ApiKey::kOffsetForLeaderEpoch, 2, 4, &HandleOffsetForLeaderEpoch},
      {ApiKey::kMetadata, 0, 13, &HandleMetadata},
      {ApiKey::kApiVersions, 0, 5, &HandleApiVersions},
      {ApiKey::kCreateTopics, 2, 7, &HandleCreateTopics},
      {ApiKey::kDeleteTopics, 1, 6, &HandleDeleteTopics},
      {ApiKey::kDescribeCluster, 0, 2, &HandleDescribeCluster},
      {ApiKey::kDescribeQuorum, 0, 2, &HandleDescribeQuorum},
      {ApiKey::kUpdateFeatures, 0, 2, &HandleUpdateFeatures},
      {ApiKey::kDescribeTopicPartitions, 0, 0, &HandleDescribeTopicPartitions},
      {ApiKey::kCreatePartitions, 0, 3, &HandleCreatePartitions},
      {ApiKey::kDescribeConfigs, 1, 4, &HandleDescribeConfigs},
      {ApiKey::kAlterConfigs, 0, 2, &HandleAlterConfigs},
      {ApiKey::kIncrementalAlterConfigs, 0, 1, &HandleIncrementalAlterConfigs},
      {ApiKey::kFindCoordinator, 0, 6, &HandleFindCoordinator},
      {ApiKey::kOffsetCommit, 2, 10, &HandleOffsetCommit},
      {ApiKey::kOffsetFetch, 1, 10, &HandleOffsetFetch},
      {ApiKey::kOffsetDelete, 0, 0, &HandleOffsetDelete},
      {ApiKey::kTxnOffsetCommit, 0, 6, &HandleTxnOffsetCommit},
      {ApiKey::kListGroups, 0, 5, &HandleListGroups},
      {ApiKey::kDescribeGroups, 0, 6, &HandleDescribeGroups},
      {ApiKey::kDeleteGroups, 0, 3, &HandleDeleteGroups},
      {ApiKey::kConsumerGroupHeartbeat, 0, 1, &HandleConsumerGroupHeartbeat},
      {ApiKey::kConsumerGroupDescribe, 0, 1, &HandleConsumerGroupDescribe},
      {ApiKey::kJoinGroup, 0, 9, &HandleJoinGroup},
      {ApiKey::kSyncGroup, 0, 5, &HandleSyncGroup},
      {ApiKey::kHeartbeat, 0, 4, &HandleHeartbeat},
      {ApiKey::kLeaveGroup, 0, 5, &HandleLeaveGroup},
      {ApiKey::kInitProducerId, 0, 5, &HandleInitProducerId},
      {ApiKey::kAddPartitionsToTxn, 0, 5, &HandleAddPartitionsToTxn},
      {ApiKey::kAddOffsetsToTxn, 0, 4, &HandleAddOffsetsToTxn},
      {ApiKey::kEndTxn, 0, 5, &HandleEndTxn},
      {ApiKey::kDescribeTransactions, 0, 0, &HandleDescribeTransactions},
      {ApiKey::kListTransactions, 0, 2, &HandleListTransactions},
      {ApiKey::kDescribeProducers, 0, 0, &HandleDescribeProducers},
      {ApiKey::kWriteTxnMarkers, 1, 2, &HandleWriteTxnMarkers},
  };
  return kApis;
}

const ApiEntry* FindSupportedApi(int16_t api_key) {
  for (const ApiEntry& e : SupportedApis()) {
    if (static_cast<int16_t>(e.key) == api_key) return &e;
  }
  return nullptr;
}

std::vector<BrokerAddress> BrokersOnListener(const MetadataCache& cache,
                                             const std::string& listener, bool include_fenced) {
  std::vector<BrokerAddress> out;
  for (const auto& [id, b] : cache.brokers()) {
    if (b.fenced && !include_fenced) continue;
    for (const auto& ep : b.endpoints) {
      if (ep.name() == listener) out.push_back({b.id, ep.host(), ep.port(), b.rack, b.fenced});
    }
  }
  return out;
}

int32_t ControllerIdForClients(const MetadataCache& cache,
                               const std::vector<BrokerAddress>& brokers, int32_t self) {
  const int32_t active = cache.active_controller();
  for (const BrokerAddress& b : brokers) {
    if (active >= 0 && b.id == active) return active;
  }
  return self;
}

std::shared_ptr<spdlog::logger> KafkaLog() {
  static auto logger = log::Get("brokerd.kafka");
  return logger;
}

}  // namespace runnel::brokerd
