// Kafka's rules for a legal topic name (Kafka's Topic.validate).
#pragma once

#include <string>

namespace runnel {

inline constexpr size_t kMaxTopicNameLength = 249;

// Empty when `name` is a legal topic name, else why not, in Kafka's wording.
std::string TopicNameError(const std::string& name);

}  // namespace runnel
