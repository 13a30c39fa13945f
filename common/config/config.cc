#include "common/config/config.h"

#include <absl/strings/ascii.h>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "common/config/quorum_voters.h"

namespace runnel::config {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

std::optional<int64_t> ParseInteger(std::string_view v) {
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty()) return std::nullopt;
  return out;
}

std::optional<bool> ParseBool(std::string_view v) {
  std::string lower(v);
  for (char& c : lower) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  if (lower == "true") return true;
  if (lower == "false") return false;
  return std::nullopt;
}

}  // namespace

std::string_view KeyTypeName(KeyType t) {
  switch (t) {
    case KeyType::kInt:
      return "int";
    case KeyType::kLong:
      return "long";
    case KeyType::kBool:
      return "boolean";
    case KeyType::kString:
      return "string";
    case KeyType::kList:
      return "list";
    case KeyType::kPath:
      return "path";
  }
  return "?";
}

const KeyDef* FindKey(std::string_view name) {
  for (const KeyDef& def : AllKeys()) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

std::vector<std::string> SplitList(std::string_view value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view item = Trim(value.substr(start, comma - start));
    if (!item.empty()) out.emplace_back(item);
    start = comma + 1;
  }
  return out;
}

std::string OneOf(std::string_view value, std::initializer_list<std::string_view> allowed) {
  for (std::string_view a : allowed) {
    if (value == a) return "";
  }
  std::string list;
  for (std::string_view a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
  return fmt::format("String must be one of: {}", list);
}

std::string ValidateCleanupPolicy(std::string_view value) {
  std::vector<std::string> items = SplitList(value);
  if (items.empty()) return "must be delete, compact or compact,delete";
  std::set<std::string> seen;
  for (const std::string& item : items) {
    if (item != "delete" && item != "compact") {
      return fmt::format("'{}' is not one of compact, delete", item);
    }
    if (!seen.insert(item).second) return fmt::format("'{}' is listed twice", item);
  }
  return "";
}

std::string ValidateTimestampType(std::string_view value) {
  return OneOf(value, {"CreateTime", "LogAppendTime"});
}

std::string ValidateRatio(std::string_view value) {
  double d = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), d);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() ||
      !std::isfinite(d)) {
    return "not a number (expected double)";
  }
  if (d < 0.0 || d > 1.0) return "Value must be between 0 and 1";
  return "";
}

std::string CheckValue(const KeyDef& def, std::string_view value) {
  switch (def.type) {
    case KeyType::kInt:
    case KeyType::kLong: {
      std::optional<int64_t> n = ParseInteger(value);
      if (!n) return fmt::format("not a whole number (expected {})", KeyTypeName(def.type));
      int64_t lo = def.min, hi = def.max;
      if (def.type == KeyType::kInt) {
        lo = std::max<int64_t>(lo, INT32_MIN);
        hi = std::min<int64_t>(hi, INT32_MAX);
      }
      if (*n < lo || *n > hi) return fmt::format("must be between {} and {}", lo, hi);
      break;
    }
    case KeyType::kBool:
      if (!ParseBool(value)) return "must be true or false";
      break;
    case KeyType::kPath:
      if (value.empty()) return "must not be empty";
      break;
    case KeyType::kString:
    case KeyType::kList:
      break;
  }
  if (def.validate != nullptr) return def.validate(value);
  return "";
}

Status Config::Set(std::string_view key, std::string_view value,
                   std::vector<std::string>* warnings) {
  const KeyDef* def = FindKey(key);
  if (def == nullptr) {
    if (warnings != nullptr) {
      warnings->push_back(fmt::format("config warning: unknown key '{}' is ignored", key));
    }
  } else if (std::string why = CheckValue(*def, value); !why.empty()) {
    return absl::InvalidArgumentError(fmt::format("config error: {}={}: {}", key, value, why));
  }
  values_[std::string(key)] = std::string(value);
  return absl::OkStatus();
}

StatusOr<Config> Config::Parse(std::string_view text, std::vector<std::string>* warnings) {
  Config config;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view l = Trim(line);
    if (l.empty() || l.front() == '#' || l.front() == '!') continue;
    size_t sep = l.find_first_of("=:");
    if (sep == std::string_view::npos) {
      return absl::InvalidArgumentError(
          fmt::format("config error: line {}: '{}' is not key=value", line_no, l));
    }
    std::string_view key = Trim(l.substr(0, sep));
    std::string_view value = Trim(l.substr(sep + 1));
    if (key.empty()) {
      return absl::InvalidArgumentError(fmt::format("config error: line {}: empty key", line_no));
    }
    RUNNEL_RETURN_IF_ERROR(config.Set(key, value, warnings));
  }
  RUNNEL_RETURN_IF_ERROR(CheckQuorumConfig(config));
  return config;
}

StatusOr<Config> Config::Load(const std::string& path, std::vector<std::string>* warnings) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(fmt::format("config error: cannot read config file {}", path));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  return Parse(buf.str(), warnings);
}

StatusOr<Config> Config::FromMap(const std::map<std::string, std::string>& overrides) {
  Config config;
  for (const auto& [k, v] : overrides) RUNNEL_RETURN_IF_ERROR(config.Set(k, v, nullptr));
  RUNNEL_RETURN_IF_ERROR(CheckQuorumConfig(config));
  return config;
}

const KeyDef& Config::Def(std::string_view key, KeyType expected) const {
  const KeyDef* def = FindKey(key);
  if (def == nullptr || def->type != expected) {
    fprintf(stderr, "internal error: config key %.*s is not declared as %.*s\n",
            static_cast<int>(key.size()), key.data(),
            static_cast<int>(KeyTypeName(expected).size()), KeyTypeName(expected).data());
    std::abort();
  }
  return *def;
}

std::string Config::Raw(std::string_view key) const {
  auto it = values_.find(key);
  if (it != values_.end()) return it->second;
  const KeyDef* def = FindKey(key);
  return def ? std::string(def->default_value) : std::string();
}

Source Config::SourceOf(std::string_view key) const {
  return values_.count(key) ? Source::kFile : Source::kDefault;
}

int32_t Config::GetInt(std::string_view key) const {
  Def(key, KeyType::kInt);
  return static_cast<int32_t>(*ParseInteger(Raw(key)));
}
int64_t Config::GetLong(std::string_view key) const {
  Def(key, KeyType::kLong);
  return *ParseInteger(Raw(key));
}
bool Config::GetBool(std::string_view key) const {
  Def(key, KeyType::kBool);
  return *ParseBool(Raw(key));
}
std::string Config::GetString(std::string_view key) const {
  const KeyDef* def = FindKey(key);
  if (def == nullptr || (def->type != KeyType::kString && def->type != KeyType::kPath)) {
    Def(key, KeyType::kString);
  }
  return Raw(key);
}
std::vector<std::string> Config::GetList(std::string_view key) const {
  Def(key, KeyType::kList);
  return SplitList(Raw(key));
}

std::string MarkdownTable() {
  std::string out = "| key | type | default | restart | description |\n|---|---|---|---|---|\n";
  for (const KeyDef& def : AllKeys()) {
    std::string range;
    if ((def.type == KeyType::kInt || def.type == KeyType::kLong) &&
        (def.min != INT64_MIN || def.max != INT64_MAX)) {
      range = fmt::format(" [{}..{}]", def.min == INT64_MIN ? "" : fmt::format("{}", def.min),
                          def.max == INT64_MAX ? "" : fmt::format("{}", def.max));
    }
    out += fmt::format("| `{}` | {}{} | `{}` | {} | {} |\n", def.name, KeyTypeName(def.type), range,
                       def.default_value, def.needs_restart ? "yes" : "no", def.doc);
  }
  return out;
}

}  // namespace runnel::config
