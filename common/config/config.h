// Node configuration: one Kafka-style .properties file per node.
//
// Every key Runnel understands is declared once, in keys.cc, with its type, default,
// bounds, a line of documentation and whether a change needs a restart. Parsing, the
// startup error message, DescribeConfigs' defaults and the README's table all come from
// that one declaration.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/util/status.h"

namespace runnel::config {

enum class KeyType { kInt, kLong, kBool, kString, kList, kPath };

std::string_view KeyTypeName(KeyType t);

// Checks a value beyond its type; returns an empty string when it is fine, else why not.
using Validator = std::string (*)(std::string_view value);

struct KeyDef {
  std::string_view name;
  KeyType type;
  std::string_view default_value;  // as written in a properties file; "" = empty/none
  int64_t min = INT64_MIN;         // bounds for kInt/kLong
  int64_t max = INT64_MAX;
  std::string_view doc;
  bool needs_restart = true;
  Validator validate = nullptr;
};

// All declared keys, sorted by name.
const std::vector<KeyDef>& AllKeys();
const KeyDef* FindKey(std::string_view name);

// Where a value came from, as DescribeConfigs reports it.
enum class Source { kDefault, kFile, kOverride };

// A validated configuration. Getters take declared key names; asking for an undeclared
// key or the wrong type is a programming error and aborts.
class Config {
 public:
  // Parses properties text. Unknown keys are returned in `warnings`; a bad value is an
  // error "config error: <key>=<value>: <why>".
  static StatusOr<Config> Parse(std::string_view text, std::vector<std::string>* warnings);
  static StatusOr<Config> Load(const std::string& path, std::vector<std::string>* warnings);
  // A configuration of defaults only, with `overrides` applied (for tests).
  static StatusOr<Config> FromMap(const std::map<std::string, std::string>& overrides);

  int32_t GetInt(std::string_view key) const;
  int64_t GetLong(std::string_view key) const;
  bool GetBool(std::string_view key) const;
  std::string GetString(std::string_view key) const;
  std::vector<std::string> GetList(std::string_view key) const;

  // The raw value (explicit or default) and its source.
  std::string Raw(std::string_view key) const;
  Source SourceOf(std::string_view key) const;

  // Every explicitly set key (declared or not), as read.
  const std::map<std::string, std::string, std::less<>>& explicit_values() const { return values_; }

 private:
  Status Set(std::string_view key, std::string_view value, std::vector<std::string>* warnings);
  const KeyDef& Def(std::string_view key, KeyType expected) const;

  std::map<std::string, std::string, std::less<>> values_;
};

// Checks one value against a declaration; returns "" or why it is wrong.
std::string CheckValue(const KeyDef& def, std::string_view value);

// The markdown table of all keys (for the README and `runnel --config-docs`).
std::string MarkdownTable();

// "" when `value` is one of `allowed`, else Kafka's "String must be one of: ..." message.
std::string OneOf(std::string_view value, std::initializer_list<std::string_view> allowed);

// Validators of values that both a node key and a topic config take (log.cleanup.policy and
// cleanup.policy, ...), so both declarations check them the same way.
// "delete", "compact" or both, comma-separated, each at most once.
std::string ValidateCleanupPolicy(std::string_view value);
// "CreateTime" or "LogAppendTime".
std::string ValidateTimestampType(std::string_view value);
// A double in [0, 1] (declared as a string: KeyType has no double).
std::string ValidateRatio(std::string_view value);

// Splits "a, b,c" into trimmed non-empty items.
std::vector<std::string> SplitList(std::string_view value);

}  // namespace runnel::config
