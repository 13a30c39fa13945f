// Controller writes of feature levels: UpdateFeatures, with the rules of Kafka's
// FeatureControlManager (checks, their order and messages) and QuorumController.updateFeatures
// (one refused update refuses the request, the answer's top-level message).
#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/util/features.h"
#include "controllerd/controller.h"
#include "controllerd/controller_internal.h"

namespace runnel::controllerd {

using internal::kLog;
using protocol::ErrorCode;

namespace {

// Kafka's FeatureUpdate.UpgradeType ids.
constexpr int32_t kUpgrade = 1;
constexpr int32_t kSafeDowngrade = 2;
constexpr int32_t kUnsafeDowngrade = 3;

protocol::KafkaError InvalidUpdateVersion(const controller::FeatureUpdate& update,
                                          std::string_view why) {
  return {ErrorCode::kInvalidUpdateVersion,
          fmt::format("Invalid update version {} for feature {}. {}",
                      static_cast<int16_t>(update.max_version_level()), update.feature(), why)};
}

// Kafka's VersionRange text: "2" or "0-2".
std::string RangeText(const SupportedFeature& f) {
  return f.min_level == f.max_level ? fmt::format("{}", f.min_level)
                                    : fmt::format("{}-{}", f.min_level, f.max_level);
}

}  // namespace

std::optional<protocol::KafkaError> Controller::UpdateFeatureLocked(
    const controller::FeatureUpdate& update, metadata::MetadataRecordBatch* batch) const {
  const int32_t type = update.upgrade_type();
  if (type != kUpgrade && type != kSafeDowngrade && type != kUnsafeDowngrade) {
    return InvalidUpdateVersion(update, "The controller does not support the given upgrade type.");
  }
  const std::string& name = update.feature();
  const int16_t level = static_cast<int16_t>(update.max_version_level());
  auto current_it = image_.features().find(name);
  const int32_t current = current_it == image_.features().end() ? 0 : current_it->second;
  if (level < 0) return InvalidUpdateVersion(update, "A feature version cannot be less than 0.");

  // Whether this controller supports the level. A feature it does not know has Kafka's
  // DISABLED range (0-0); Runnel's own metadata.version is not Kafka's and cannot be set.
  const SupportedFeature* supported = FindSupportedFeature(name);
  const bool known = supported != nullptr;
  const SupportedFeature range = known ? *supported : SupportedFeature{name, 0, 0};
  const bool in_range = level >= range.min_level && level <= range.max_level;
  if (!in_range || name == kMetadataVersionFeature) {
    const std::string what = fmt::format("Local controller {}", options_.node_id);
    if (range.max_level == 0) {
      return InvalidUpdateVersion(update, fmt::format("{} does not support this feature.", what));
    }
    return InvalidUpdateVersion(
        update, fmt::format("{} only supports versions {}", what, RangeText(range)));
  }

  if (level < current && type == kUpgrade) {
    return InvalidUpdateVersion(update,
                                "Can't downgrade the version of this feature without setting the "
                                "upgrade type to either safe or unsafe downgrade.");
  }
  if (level > current && type != kUpgrade) {
    return InvalidUpdateVersion(update, "Can't downgrade to a newer version.");
  }
  // Kafka then checks the level's dependencies on other features; it looks the feature up
  // among those it knows first, so a disabled unknown one ends here.
  if (!known) return InvalidUpdateVersion(update, fmt::format("Feature {} not found.", name));
  // transaction.version has no dependency Runnel could miss (Kafka's: metadata.version 3.3+
  // for a level >= 1, which Runnel's metadata always has).

  auto* record = batch->add_records()->mutable_feature_level();
  record->set_name(name);
  record->set_feature_level(level);
  return std::nullopt;
}

StatusOr<controller::UpdateFeaturesResponse> Controller::UpdateFeatures(
    const controller::UpdateFeaturesRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  // By name; a feature named twice: the last one, as Kafka's map keeps it.
  std::map<std::string, const controller::FeatureUpdate*> updates;
  for (const controller::FeatureUpdate& u : request.updates()) updates[u.feature()] = &u;

  controller::UpdateFeaturesResponse response;
  response.set_metadata_offset(-1);
  metadata::MetadataRecordBatch batch;
  std::vector<std::string> changes;  // for the log line
  for (const auto& [name, update] : updates) {
    if (std::optional<protocol::KafkaError> error = UpdateFeatureLocked(*update, &batch)) {
      kLog()->warn("UpdateFeatures refused: {}", error->message);
      response.set_error_code(static_cast<int32_t>(error->code));
      response.set_error_message(
          "The update failed for all features since the following feature had an error: " +
          error->message);
      return response;
    }
    changes.push_back(fmt::format("{}={}", name, update->max_version_level()));
  }
  lock.Unlock();
  if (request.validate_only() || batch.records_size() == 0) return response;
  RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
  response.set_metadata_offset(offset);
  std::string joined;
  for (const std::string& c : changes) joined += (joined.empty() ? "" : ", ") + c;
  kLog()->info("feature levels changed at offset {}: {}", offset, joined);
  return response;
}

}  // namespace runnel::controllerd
