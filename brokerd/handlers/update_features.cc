// UpdateFeatures (key 57), v0-v2: kafka-features.sh upgrade / downgrade / disable. Forwarded to
// the active controller, which checks every update with Kafka's rules and writes their
// FeatureLevelRecords in one batch (controllerd/controller_features.cc); answered once this
// broker's metadata cache has the new levels, so the client's next ApiVersions shows them
// with the new FinalizedFeaturesEpoch. v0 has no UpgradeType: AllowDowngrade means
// SAFE_DOWNGRADE, else UPGRADE. An error is the whole request's (Kafka's QuorumController):
// top-level only, with no per-feature results; on success v0-v1 list each feature with
// NONE, as Kafka does ("NONE" as message), and v2 lists none.
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::UpdateFeaturesRequest;
using protocol::UpdateFeaturesResponse;
namespace ctl = runnel::controller;

// Kafka's FeatureUpdate.UpgradeType ids.
constexpr int32_t kUpgrade = 1;
constexpr int32_t kSafeDowngrade = 2;
// The last version whose answer lists each feature.
constexpr int16_t kLastVersionWithResults = 1;

ctl::UpdateFeaturesRequest ToController(const UpdateFeaturesRequest& req, int16_t version) {
  ctl::UpdateFeaturesRequest out;
  out.set_validate_only(req.validate_only);
  for (const auto& u : req.feature_updates) {
    ctl::FeatureUpdate* update = out.add_updates();
    update->set_feature(u.feature);
    update->set_max_version_level(u.max_version_level);
    update->set_upgrade_type(version == 0 ? (u.allow_downgrade ? kSafeDowngrade : kUpgrade)
                                          : u.upgrade_type);
  }
  return out;
}

}  // namespace

void HandleUpdateFeatures(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                          Respond respond) {
  UpdateFeaturesRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  // Authorization (issue 25) goes here: Kafka answers CLUSTER_AUTHORIZATION_FAILED at top
  // level unless the principal may ALTER the CLUSTER resource.

  const int64_t timeout_ms = std::max<int32_t>(req.timeout_ms, 0);
  // The controller gets at least a moment even when the client asked for no wait.
  const auto call_timeout = std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 5000));
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  auto features = std::make_shared<std::vector<std::string>>();
  for (const auto& u : req.feature_updates) features->push_back(u.feature);
  broker.controller.UpdateFeatures(
      ToController(req, shared_ctx->header.api_version), call_timeout,
      [&broker, shared_ctx, features, respond, timeout_ms](
          const grpc::Status& status, const ctl::UpdateFeaturesResponse& result) {
        auto resp = std::make_shared<UpdateFeaturesResponse>();
        int64_t offset = -1;
        if (!status.ok()) {
          KafkaLog()->warn("UpdateFeatures: controller call failed: {}", status.error_message());
          resp->error_code = ControllerCallError(status);
          resp->error_message = status.error_message();
        } else {
          offset = result.metadata_offset();
          resp->error_code = protocol::ErrorFromWire(result.error_code());
          resp->error_message = std::nullopt;
          if (result.has_error_message()) resp->error_message = result.error_message();
          if (resp->error_code == ErrorCode::kNone &&
              shared_ctx->header.api_version <= kLastVersionWithResults) {
            for (const std::string& name : *features) {
              UpdateFeaturesResponse::UpdatableFeatureResult r;
              r.feature = name;
              r.error_code = ErrorCode::kNone;
              r.error_message = "NONE";
              resp->results.push_back(std::move(r));
            }
          }
        }
        WaitForMetadata(
            broker, [&broker, offset] { return broker.metadata.offset() >= offset; }, timeout_ms,
            [shared_ctx, resp, respond] { respond(EncodeResponse(*shared_ctx, *resp)); });
      });
}

}  // namespace runnel::brokerd
