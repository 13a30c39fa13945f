// ApiVersions (key 18), v0-v5. Checks in Kafka's order: ClientSoftwareName/Version (v3+)
// must match Kafka's pattern (INVALID_REQUEST); from v5 (KIP-1242) a client that names the
// cluster id it expects (non-null) gets REBOOTSTRAP_REQUIRED unless both it and the node id
// it names are this broker's. Either error answers with no API list, as Kafka. From v3 the
// answer carries the cluster's supported and finalized features (FillFeatures).
#include <regex>

#include "brokerd/handlers/handler.h"
#include "common/util/features.h"

namespace runnel::brokerd {
namespace {

using protocol::ApiVersionsRequest;
using protocol::ApiVersionsResponse;
using protocol::ErrorCode;

constexpr int16_t kFirstClusterCheckVersion = 5;

// The features a client may look at (v3+): those Runnel supports, with their ranges
// (common/util/features.h: transaction.version only; why not the others is there), and the
// levels the cluster finalized (UpdateFeatures changes them). Runnel's metadata.version is
// its own numbering, not Kafka's, so it stays out of the answer.
void FillFeatures(const MetadataCache& metadata, ApiVersionsResponse& resp) {
  for (const SupportedFeature& f : SupportedFeatures()) {
    ApiVersionsResponse::SupportedFeatureKey supported;
    supported.name = std::string(f.name);
    supported.min_version = f.min_level;
    supported.max_version = f.max_level;
    resp.supported_features.push_back(std::move(supported));
  }
  resp.finalized_features_epoch = metadata.features_epoch();
  for (const SupportedFeature& f : SupportedFeatures()) {
    if (int16_t level = metadata.FeatureLevel(std::string(f.name)); level > 0) {
      ApiVersionsResponse::FinalizedFeatureKey finalized;
      finalized.name = std::string(f.name);
      finalized.min_version_level = level;
      finalized.max_version_level = level;
      resp.finalized_features.push_back(std::move(finalized));
    }
  }
}

void FillApiKeys(ApiVersionsResponse& resp) {
  for (const ApiEntry& e : SupportedApis()) {
    ApiVersionsResponse::ApiVersion v;
    v.api_key = static_cast<int16_t>(e.key);
    v.min_version = e.min_version;
    v.max_version = e.max_version;
    resp.api_keys.push_back(v);
  }
}

// Kafka's rule for ClientSoftwareName / ClientSoftwareVersion (v3+).
bool ValidSoftwareField(const std::string& s) {
  static const std::regex kPattern("[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?");
  return std::regex_match(s, kPattern);
}

}  // namespace

Response UnsupportedApiVersionsResponse(const RequestContext& ctx) {
  ApiVersionsResponse resp;
  resp.error_code = ErrorCode::kUnsupportedVersion;
  FillApiKeys(resp);
  return EncodeResponseAt(ctx, resp, 0);
}

void HandleApiVersions(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                       Respond respond) {
  ApiVersionsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  ApiVersionsResponse resp;
  if (ctx->header.api_version >= 3 && (!ValidSoftwareField(req.client_software_name) ||
                                       !ValidSoftwareField(req.client_software_version))) {
    resp.error_code = ErrorCode::kInvalidRequest;
    return respond(EncodeResponse(*ctx, resp));
  }
  if (ctx->header.api_version >= kFirstClusterCheckVersion && req.cluster_id.has_value() &&
      (*req.cluster_id != broker.metadata.cluster_id() || req.node_id != broker.node_id)) {
    resp.error_code = ErrorCode::kRebootstrapRequired;
    return respond(EncodeResponse(*ctx, resp));
  }
  FillApiKeys(resp);
  FillFeatures(broker.metadata, resp);
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
