// Parsing of Kafka's `controller.quorum.voters`: the controllers that vote in the Raft
// quorum of the metadata log, `id@host:port` comma-separated.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/util/status.h"

namespace runnel::config {

class Config;

struct QuorumVoter {
  int32_t id = -1;
  std::string host;  // as written (an IPv6 address without its brackets)
  int port = 0;
  // "host:port" for a gRPC channel or a listening port (IPv6 in brackets).
  std::string Address() const;
  bool operator==(const QuorumVoter&) const = default;
};

// Parses a `controller.quorum.voters` value: ids >= 0 and unique, ports in 1..65535, hosts
// not empty. An empty value gives no voters (the single-voter default).
StatusOr<std::vector<QuorumVoter>> ParseQuorumVoters(std::string_view value);

// The checks that need more than one key (run by Config::Parse and Config::FromMap): a node
// whose process.roles has controller must be one of controller.quorum.voters when it is set;
// broker.session.timeout.ms must be more than broker.heartbeat.interval.ms.
Status CheckQuorumConfig(const Config& config);

}  // namespace runnel::config
