#include "common/util/topic_name.h"

#include <fmt/format.h>

namespace runnel {

std::string TopicNameError(const std::string& name) {
  if (name.empty()) return "Topic name is illegal, it can't be empty";
  if (name == "." || name == "..") return "Topic name cannot be \".\" or \"..\"";
  if (name.size() > kMaxTopicNameLength) {
    return fmt::format(
        "Topic name is illegal, it can't be longer than {} characters, topic name: {}",
        kMaxTopicNameLength, name);
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return fmt::format(
          "Topic name \"{}\" is illegal, it contains a character other than ASCII "
          "alphanumerics, '.', '_' and '-'",
          name);
    }
  }
  return "";
}

}  // namespace runnel
