// MetadataImage: the cluster metadata as the result of applying the metadata log's records
// in order. Deterministic: the same records give the same image, and ToRecords() (what a
// snapshot holds) loaded into an empty image gives an equal image.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/util/status.h"
#include "proto/runnel/metadata.pb.h"

namespace runnel::controllerd {

class MetadataImage {
 public:
  struct Topic {
    std::string name;
    std::string id;  // 16 bytes
    std::map<int32_t, metadata::PartitionRecord> partitions;
    std::map<std::string, std::string> configs;  // explicitly set topic configs only
  };

  // Applies the batch at log offset `offset`. Records were checked before they were
  // written, so an error here means a bug or a damaged log: the image is then unusable
  // (possibly half-applied) and the caller must stop.
  Status Apply(int64_t offset, const metadata::MetadataRecordBatch& batch);

  // Replaces everything with a snapshot's records; `offset` is the last entry it covers.
  Status Load(int64_t offset, const metadata::MetadataRecordBatch& image);

  // The whole image as records, in a fixed order: cluster id, features, brokers (by id),
  // broker configs, then per topic (by name) its TopicRecord, ConfigRecords (by key) and
  // PartitionRecords (by partition). The producer id counter follows the brokers.
  metadata::MetadataRecordBatch ToRecords() const;

  // Offset of the last applied entry, -1 when none.
  int64_t offset() const { return offset_; }
  const std::string& cluster_id() const { return cluster_id_; }
  // The finalized features above level 0 (a level-0 record removes one).
  const std::map<std::string, int32_t>& features() const { return features_; }
  const std::map<int32_t, metadata::RegisterBrokerRecord>& brokers() const { return brokers_; }
  // Dynamic broker configs: resource name (a node id as text, "" = cluster default) -> key ->
  // value; only resources with at least one key.
  const std::map<std::string, std::map<std::string, std::string>>& broker_configs() const {
    return broker_configs_;
  }
  const std::map<std::string, Topic>& topics() const { return topics_; }
  // The first producer id not yet handed out in a block (0 when none was).
  int64_t next_producer_id() const { return next_producer_id_; }
  const Topic* TopicByName(std::string_view name) const;
  const Topic* TopicById(std::string_view id) const;

  bool operator==(const MetadataImage& other) const;

 private:
  Status ApplyRecord(const metadata::MetadataRecord& record);

  int64_t offset_ = -1;
  std::string cluster_id_;
  std::map<std::string, int32_t> features_;
  std::map<int32_t, metadata::RegisterBrokerRecord> brokers_;
  // resource name ("" = cluster default) -> key -> value
  std::map<std::string, std::map<std::string, std::string>> broker_configs_;
  std::map<std::string, Topic> topics_;  // by name
  int64_t next_producer_id_ = 0;
  std::map<std::string, std::string> topic_names_by_id_;
};

}  // namespace runnel::controllerd
