// Kafka's topic-level configs: their declarations (type, default, bounds, doc) and the
// validation of the configs a client gives when creating or altering a topic.
//
// They reuse config::KeyDef, so CheckValue, the startup-error wording and documentation
// tables work the same as for node keys. Defaults are Apache Kafka's.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"

namespace runnel::config {

// All declared topic configs, sorted by name.
const std::vector<KeyDef>& AllTopicKeys();
const KeyDef* FindTopicKey(std::string_view name);

// Checks explicit topic configs (name -> value). The first bad one gives an
// InvalidArgument status with Kafka 4.4's wording, naming the key:
//   "Unknown topic config name: <key>"   (also for keys Kafka removed, e.g.
//                                         message.downconversion.enable)
//   "Invalid value <value> for configuration <key>: <why>"   (<why> as Kafka's ConfigDef
//                                         says it: "Value must be at least 1", ...)
// remote.storage.enable=true is refused as Kafka refuses it on a broker without tiered storage.
Status ValidateTopicConfigs(const std::map<std::string, std::string>& configs);

// Every topic config with its effective value: the explicit one when given, else the default.
std::map<std::string, std::string> EffectiveTopicConfigs(
    const std::map<std::string, std::string>& explicit_configs);

}  // namespace runnel::config
