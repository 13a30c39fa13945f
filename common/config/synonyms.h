// Kafka's synonyms between topic configs and the node keys that give their defaults
// (retention.ms <- log.retention.ms, log.retention.minutes, log.retention.hours; segment.bytes
// <- log.segment.bytes; max.message.bytes <- message.max.bytes; ...), and which node keys
// Runnel lets AlterConfigs change at runtime.
//
// This one table serves DescribeConfigs (sources and synonyms), the configs brokerd pushes to
// storaged for a topic, and the controller's check of dynamic broker configs. It must agree
// with how storaged resolves its node defaults (storaged/log/log_config.cc: the finest unit set
// wins, a negative coarse duration means -1).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"

namespace runnel::config {

// A node key giving a topic config's default. A duration in a coarser unit is multiplied by
// `unit` to get the topic config's value (60000 for minutes, 3600000 for hours).
struct NodeSynonym {
  std::string_view name;
  int64_t unit = 1;
};

struct TopicSynonyms {
  std::string_view topic_key;
  // Most specific first: at one level (dynamic, file, ...) the first key set wins.
  std::vector<NodeSynonym> node_keys;
};

// Every topic config that has node synonyms in Runnel, sorted by topic key. Topic configs
// missing here (compression.type, ...) have no node key yet: their default is the topic
// declaration's.
const std::vector<TopicSynonyms>& AllTopicSynonyms();

// The node synonyms of a topic config, most specific first; empty when it has none.
std::span<const NodeSynonym> NodeSynonymsOf(std::string_view topic_key);

// Whether Kafka declares `node_key` without a default (log.retention.ms, log.roll.ms, ...):
// DescribeConfigs then lists no DEFAULT_CONFIG synonym for it.
bool KafkaDefaultIsNull(std::string_view node_key);

// The broker key that Kafka 4.4 lists as the DEFAULT_CONFIG synonym of a topic config that
// has no node key in Runnel (compression.type, log.local.retention.ms, ...), with the topic
// config's default as its value; "" when there is none.
std::string_view UndeclaredBrokerSynonym(std::string_view topic_key);

// The node keys that set the same thing as `node_key` (Kafka's brokerConfigSynonyms), most
// specific first, e.g. log.retention.ms, log.retention.minutes, log.retention.hours for any of
// them; {node_key} for a key with a single form.
std::vector<std::string_view> NodeKeyGroup(std::string_view node_key);

// The node keys Runnel applies when AlterConfigs changes them on a broker resource (per broker
// or cluster-wide): the node defaults of topic configs, because those reach storaged as topic
// configs (brokerd/controller/topic_configs.h). Kafka allows more keys to change at runtime; Runnel
// refuses the ones it cannot apply with Kafka's "Cannot update these configs dynamically".
bool IsDynamicNodeKey(std::string_view name);

// `value` of `synonym` in its topic config's unit: unchanged for unit 1, else multiplied,
// with a negative duration meaning "no limit" (-1), as Kafka and storaged read it.
std::string ToTopicUnit(const NodeSynonym& synonym, const std::string& value);

// Kafka's DescribeConfigs ConfigType id of a declared key (1 BOOLEAN, 2 STRING, 3 INT,
// 5 LONG, 6 DOUBLE, 7 LIST).
int8_t KafkaConfigType(const KeyDef& def);

// Whether a key holds a secret: DescribeConfigs returns its value as null, logs never show it.
bool IsSensitiveKey(std::string_view name);

}  // namespace runnel::config
