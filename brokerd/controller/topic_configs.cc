#include "brokerd/controller/topic_configs.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/config/synonyms.h"
#include "common/config/topic_config.h"

namespace runnel::brokerd {
namespace {

// The broker levels, most specific first (the topic level and the declared defaults are
// handled by the callers).
constexpr ConfigSource kBrokerLevels[] = {
    ConfigSource::kDynamicBroker, ConfigSource::kDynamicDefaultBroker, ConfigSource::kStaticBroker};

std::optional<std::string> Find(const std::map<std::string, std::string>& m, std::string_view key) {
  auto it = m.find(std::string(key));
  if (it == m.end()) return std::nullopt;
  return it->second;
}

// The value `key` has at one broker level, if that level sets it.
std::optional<std::string> ValueAt(const NodeConfigView& node, ConfigSource level,
                                   std::string_view key) {
  switch (level) {
    case ConfigSource::kDynamicBroker:
      return Find(node.per_broker, key);
    case ConfigSource::kDynamicDefaultBroker:
      return Find(node.cluster_default, key);
    case ConfigSource::kStaticBroker:
      if (node.file.SourceOf(key) == config::Source::kDefault) return std::nullopt;
      return node.file.Raw(key);
    case ConfigSource::kTopic:
    case ConfigSource::kDefault:
      break;
  }
  return std::nullopt;
}

std::optional<std::string> Masked(bool sensitive, std::string value) {
  if (sensitive) return std::nullopt;
  return value;
}

// A node key as its own broker resource shows it. `cluster_default_only` keeps only the
// cluster-wide dynamic level (the "" resource).
DescribedConfig DescribeNodeKey(const NodeConfigView& node, const config::KeyDef& def,
                                bool cluster_default_only) {
  const std::string name(def.name);
  const bool sensitive = config::IsSensitiveKey(name);
  // Every level x every form of the key (log.retention.hours also lists log.retention.ms set
  // above it), then Kafka drops the entries before the key's own first one: a more specific
  // form set elsewhere is not this key's value.
  std::vector<ConfigSynonym> all;
  for (ConfigSource level : kBrokerLevels) {
    if (cluster_default_only && level != ConfigSource::kDynamicDefaultBroker) continue;
    for (std::string_view form : config::NodeKeyGroup(name)) {
      if (std::optional<std::string> v = ValueAt(node, level, form)) {
        all.push_back({std::string(form), Masked(sensitive, *v), level});
      }
    }
  }
  if (!cluster_default_only) {
    all.push_back(
        {name, Masked(sensitive, std::string(def.default_value)), ConfigSource::kDefault});
  }
  auto own =
      std::find_if(all.begin(), all.end(), [&](const ConfigSynonym& s) { return s.name == name; });
  // Callers only ask for the cluster default of keys set there, so `own` is always found.
  std::vector<ConfigSynonym> synonyms(own, all.end());

  DescribedConfig out;
  out.name = name;
  out.value = own->value;
  out.source = own->source;
  out.read_only = !config::IsDynamicNodeKey(name);
  out.sensitive = sensitive;
  out.synonyms = std::move(synonyms);
  out.type = config::KafkaConfigType(def);
  out.documentation = std::string(def.doc);
  return out;
}

}  // namespace

NodeConfigView NodeConfigView::Of(const config::Config& file, const MetadataCache& cache,
                                  int32_t node_id) {
  return NodeConfigView{file, cache.BrokerConfigs(fmt::format("{}", node_id)),
                        cache.BrokerConfigs("")};
}

std::vector<DescribedConfig> DescribeTopicConfigs(const NodeConfigView& node,
                                                  const TopicInfo& topic) {
  std::vector<DescribedConfig> out;
  for (const config::KeyDef& def : config::AllTopicKeys()) {
    const std::string name(def.name);
    const bool sensitive = config::IsSensitiveKey(name);
    std::span<const config::NodeSynonym> node_keys = config::NodeSynonymsOf(name);

    DescribedConfig c;
    c.name = name;
    if (std::optional<std::string> v = Find(topic.configs, name)) {
      c.synonyms.push_back({name, Masked(sensitive, *v), ConfigSource::kTopic});
    }
    // The value in the topic config's unit, from the first synonym found.
    std::optional<std::string> value;
    std::vector<ConfigSynonym> broker;
    for (ConfigSource level : kBrokerLevels) {
      for (const config::NodeSynonym& s : node_keys) {
        if (std::optional<std::string> v = ValueAt(node, level, s.name)) {
          if (!value) value = config::ToTopicUnit(s, *v);
          broker.push_back({std::string(s.name), Masked(sensitive, *v), level});
        }
      }
    }
    if (!node_keys.empty()) {
      // The declared default of the most specific node key is what storaged falls back to.
      const config::KeyDef* primary = config::FindKey(node_keys.front().name);
      if (!value) value = std::string(primary ? primary->default_value : def.default_value);
      // Kafka lists the default of every form that has one, then drops the entries before
      // the most specific form's first one: with only log.retention.hours set, retention.ms
      // has no synonyms (its value is still the hours'), as in Kafka.
      for (const config::NodeSynonym& s : node_keys) {
        const config::KeyDef* form = config::FindKey(s.name);
        if (form == nullptr || config::KafkaDefaultIsNull(s.name)) continue;
        broker.push_back({std::string(s.name), Masked(sensitive, std::string(form->default_value)),
                          ConfigSource::kDefault});
      }
      const std::string_view primary_name = node_keys.front().name;
      broker.erase(broker.begin(),
                   std::find_if(broker.begin(), broker.end(),
                                [&](const ConfigSynonym& s) { return s.name == primary_name; }));
    } else if (std::string_view b = config::UndeclaredBrokerSynonym(name); !b.empty()) {
      broker.push_back({std::string(b), Masked(sensitive, std::string(def.default_value)),
                        ConfigSource::kDefault});
    }
    c.synonyms.insert(c.synonyms.end(), broker.begin(), broker.end());
    if (!c.synonyms.empty() && c.synonyms.front().source == ConfigSource::kTopic) {
      value = topic.configs.at(name);
    }
    c.value = Masked(sensitive, value.value_or(std::string(def.default_value)));
    c.source = c.synonyms.empty() ? ConfigSource::kDefault : c.synonyms.front().source;
    c.read_only = false;
    c.sensitive = sensitive;
    c.type = config::KafkaConfigType(def);
    c.documentation = std::string(def.doc);
    out.push_back(std::move(c));
  }
  return out;
}

std::string TopicConfigValue(const NodeConfigView& node, const TopicInfo& topic,
                             std::string_view name) {
  if (std::optional<std::string> v = Find(topic.configs, name)) return *v;
  std::span<const config::NodeSynonym> node_keys = config::NodeSynonymsOf(name);
  for (ConfigSource level : kBrokerLevels) {
    for (const config::NodeSynonym& s : node_keys) {
      if (std::optional<std::string> v = ValueAt(node, level, s.name)) {
        return config::ToTopicUnit(s, *v);
      }
    }
  }
  if (!node_keys.empty()) {
    if (const config::KeyDef* primary = config::FindKey(node_keys.front().name)) {
      return std::string(primary->default_value);
    }
  }
  const config::KeyDef* def = config::FindTopicKey(name);
  return def != nullptr ? std::string(def->default_value) : std::string();
}

std::vector<DescribedConfig> DescribeBrokerConfigs(const NodeConfigView& node) {
  std::vector<DescribedConfig> out;
  for (const config::KeyDef& def : config::AllKeys()) {
    out.push_back(DescribeNodeKey(node, def, /*cluster_default_only=*/false));
  }
  // Keys the file sets that Runnel does not declare: Kafka lists a broker's unknown keys with
  // an unknown type, which it treats as sensitive.
  for (const auto& [key, value] : node.file.explicit_values()) {
    if (config::FindKey(key) != nullptr) continue;
    DescribedConfig c;
    c.name = key;
    c.read_only = true;
    c.source = ConfigSource::kStaticBroker;
    c.sensitive = true;
    c.synonyms.push_back({key, std::nullopt, ConfigSource::kStaticBroker});
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(),
            [](const DescribedConfig& a, const DescribedConfig& b) { return a.name < b.name; });
  return out;
}

std::vector<DescribedConfig> DescribeClusterDefaultConfigs(const NodeConfigView& node) {
  std::vector<DescribedConfig> out;
  for (const auto& [key, value] : node.cluster_default) {
    const config::KeyDef* def = config::FindKey(key);
    if (def == nullptr) continue;  // the controller only stores declared keys
    out.push_back(DescribeNodeKey(node, *def, /*cluster_default_only=*/true));
  }
  return out;
}

std::map<std::string, std::string> StorageConfigsFor(const MetadataCache& cache,
                                                     const TopicInfo& topic) {
  std::map<std::string, std::string> out = topic.configs;
  static const std::map<std::string, std::string> kNone;
  const std::map<std::string, std::string>* levels[] = {
      cache.local_node_id() >= 0 ? &cache.BrokerConfigs(fmt::format("{}", cache.local_node_id()))
                                 : &kNone,
      &cache.BrokerConfigs("")};
  for (const config::TopicSynonyms& t : config::AllTopicSynonyms()) {
    const std::string topic_key(t.topic_key);
    if (out.count(topic_key)) continue;
    bool found = false;
    for (const auto* level : levels) {
      for (const config::NodeSynonym& s : t.node_keys) {
        if (std::optional<std::string> v = Find(*level, s.name)) {
          out[topic_key] = config::ToTopicUnit(s, *v);
          found = true;
          break;
        }
      }
      if (found) break;
    }
  }
  return out;
}

}  // namespace runnel::brokerd
