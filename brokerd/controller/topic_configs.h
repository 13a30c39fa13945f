// Effective topic and broker configs, as DescribeConfigs reports them and as brokerd pushes
// them to storaged.
//
// A value comes from the most specific level that sets it (Kafka's ConfigSource):
//   DYNAMIC_TOPIC_CONFIG          set on the topic (CreateTopics / AlterConfigs)
//   DYNAMIC_BROKER_CONFIG         set at runtime for this node (AlterConfigs, resource "<id>")
//   DYNAMIC_DEFAULT_BROKER_CONFIG set at runtime cluster-wide (AlterConfigs, resource "")
//   STATIC_BROKER_CONFIG          set in the node's config file
//   DEFAULT_CONFIG                the declared default
// A topic config takes its broker levels from its node synonyms (common/config/synonyms.h):
// retention.ms from log.retention.ms, log.retention.minutes or log.retention.hours, and so on.
// At one level the most specific synonym set wins; a level setting any of them wins over the
// levels below it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "brokerd/controller/metadata_cache.h"
#include "common/config/config.h"

namespace runnel::brokerd {

// Kafka's DescribeConfigs ConfigSource ids.
enum class ConfigSource : int8_t {
  kTopic = 1,
  kDynamicBroker = 2,
  kDynamicDefaultBroker = 3,
  kStaticBroker = 4,
  kDefault = 5,
};

struct ConfigSynonym {
  std::string name;
  std::optional<std::string> value;  // null for a sensitive key
  ConfigSource source;
  bool operator==(const ConfigSynonym&) const = default;
};

// One config of a DescribeConfigs answer.
struct DescribedConfig {
  std::string name;
  std::optional<std::string> value;  // null for a sensitive key
  bool read_only = false;
  ConfigSource source = ConfigSource::kDefault;
  bool sensitive = false;
  // Every level and synonym that sets it, most specific first (Kafka's order); the first one
  // gives `value` and `source`.
  std::vector<ConfigSynonym> synonyms;
  int8_t type = 0;  // Kafka's ConfigType id
  std::string documentation;
};

// What a node runs with at the broker levels: its config file plus the dynamic broker configs
// in the metadata cache. Holds references: valid while `file` and the cache are unchanged.
struct NodeConfigView {
  const config::Config& file;
  const std::map<std::string, std::string>& per_broker;       // resource "<node id>"
  const std::map<std::string, std::string>& cluster_default;  // resource ""

  static NodeConfigView Of(const config::Config& file, const MetadataCache& cache, int32_t node_id);
};

// Every topic config of `topic` (config::AllTopicKeys, by name) with its effective value.
std::vector<DescribedConfig> DescribeTopicConfigs(const NodeConfigView& node,
                                                  const TopicInfo& topic);

// The effective value of one topic config of `topic` (as DescribeTopicConfigs gives it, without
// the synonyms): cheap enough for a request path.
std::string TopicConfigValue(const NodeConfigView& node, const TopicInfo& topic,
                             std::string_view name);

// This node's broker resource ("<node id>"): every declared node key, plus the keys the config
// file sets that Runnel does not know (shown as Kafka shows keys of unknown type: sensitive).
// read_only is false for the keys AlterConfigs may change (config::IsDynamicNodeKey).
std::vector<DescribedConfig> DescribeBrokerConfigs(const NodeConfigView& node);

// The cluster-wide default resource (""): as in Kafka, only the keys set dynamically
// cluster-wide, with the synonyms at that level.
std::vector<DescribedConfig> DescribeClusterDefaultConfigs(const NodeConfigView& node);

// The topic's explicit configs plus the dynamic broker defaults that apply to it (this node's,
// cache.local_node_id(), then the cluster-wide ones), as topic config names (e.g. a dynamic
// log.retention.hours=2 becomes retention.ms=7200000). storaged falls back to its own config
// file for the rest, so file and declared defaults are left out.
std::map<std::string, std::string> StorageConfigsFor(const MetadataCache& cache,
                                                     const TopicInfo& topic);

}  // namespace runnel::brokerd
