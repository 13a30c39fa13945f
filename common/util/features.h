// The cluster features (Kafka's finalized features, KIP-584) Runnel supports, with the
// levels it really implements. One table: controllerd checks UpdateFeatures against it and
// brokerd advertises it in ApiVersions (SupportedFeatures), so a range is declared once.
//
// Only what Runnel implements is here:
// - transaction.version 0-2: the level the Java producer reads to run KIP-890 part 2 (2) or
//   the classic protocol (0, 1); the broker serves both whatever the level.
// - Not metadata.version: Runnel keeps its own (a FeatureLevelRecord at Runnel's numbering,
//   not Kafka's), which says nothing Kafka's levels would; it is neither advertised nor
//   changed through UpdateFeatures.
// - Not group.version: Kafka's broker gates the KIP-848 consumer protocol on it; clients do
//   not read it, and Runnel serves ConsumerGroupHeartbeat whatever it would say, so a level
//   here could not be honoured by a downgrade.
// - Not kraft.version (dynamic quorum, KIP-853: AddRaftVoter and friends are not served) nor
//   eligible.leader.replicas.version (no ELR: both ELR lists are empty).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace runnel {

struct SupportedFeature {
  std::string_view name;
  int16_t min_level;
  int16_t max_level;
};

inline constexpr std::string_view kTransactionVersionFeature = "transaction.version";
inline constexpr std::string_view kMetadataVersionFeature = "metadata.version";

inline std::span<const SupportedFeature> SupportedFeatures() {
  static constexpr SupportedFeature kFeatures[] = {
      {kTransactionVersionFeature, 0, 2},
  };
  return kFeatures;
}

// The feature named `name`, or nullptr when Runnel does not support it.
inline const SupportedFeature* FindSupportedFeature(std::string_view name) {
  for (const SupportedFeature& f : SupportedFeatures()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace runnel
