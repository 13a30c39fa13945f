#include "common/config/quorum_voters.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "common/config/config.h"

namespace runnel::config {

std::string QuorumVoter::Address() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

StatusOr<std::vector<QuorumVoter>> ParseQuorumVoters(std::string_view value) {
  std::vector<QuorumVoter> out;
  std::set<int32_t> ids;
  for (const std::string& item : SplitList(value)) {
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(fmt::format("'{}' is not id@host:port: {}", item, why));
    };
    size_t at = item.find('@');
    if (at == std::string::npos) return bad("no '@'");
    QuorumVoter v;
    std::string_view id = std::string_view(item).substr(0, at);
    auto [id_end, id_ec] = std::from_chars(id.data(), id.data() + id.size(), v.id);
    if (id.empty() || id_ec != std::errc() || id_end != id.data() + id.size() || v.id < 0) {
      return bad("the id must be a whole number >= 0");
    }
    std::string_view rest = std::string_view(item).substr(at + 1);
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    std::string_view host = rest.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    } else if (host.find(':') != std::string_view::npos) {
      return bad("an IPv6 address must be in brackets");
    }
    if (host.empty()) return bad("no host");
    v.host = std::string(host);
    std::string_view port = rest.substr(colon + 1);
    auto [port_end, port_ec] = std::from_chars(port.data(), port.data() + port.size(), v.port);
    if (port.empty() || port_ec != std::errc() || port_end != port.data() + port.size() ||
        v.port < 1 || v.port > 65535) {
      return bad("the port must be in 1..65535");
    }
    if (!ids.insert(v.id).second) {
      return absl::InvalidArgumentError(fmt::format("voter id {} is given more than once", v.id));
    }
    out.push_back(std::move(v));
  }
  return out;
}

Status CheckQuorumConfig(const Config& config) {
  // A broker that heartbeats less often than the session lasts would be fenced between beats.
  const int64_t session_ms = config.GetInt("broker.session.timeout.ms");
  const int64_t interval_ms = config.GetInt("broker.heartbeat.interval.ms");
  if (session_ms <= interval_ms) {
    return absl::InvalidArgumentError(fmt::format(
        "config error: broker.session.timeout.ms={}: must be more than "
        "broker.heartbeat.interval.ms={} (a broker would be fenced between two heartbeats)",
        session_ms, interval_ms));
  }
  std::vector<std::string> roles = config.GetList("process.roles");
  const bool controller = std::find(roles.begin(), roles.end(), "controller") != roles.end();
  const bool broker = std::find(roles.begin(), roles.end(), "broker") != roles.end();
  StatusOr<std::vector<QuorumVoter>> voters =
      ParseQuorumVoters(config.Raw("controller.quorum.voters"));
  if (!voters.ok()) return absl::OkStatus();  // the key's own check reports
  const int32_t node_id = config.GetInt("node.id");
  const bool voter = std::any_of(voters->begin(), voters->end(),
                                 [&](const QuorumVoter& v) { return v.id == node_id; });
  if (!controller) {
    if (!broker) return absl::OkStatus();
    // A broker-only node follows the quorum's log as an observer: it needs the voters, and an
    // id of its own.
    if (voters->empty()) {
      return absl::InvalidArgumentError(
          "config error: controller.quorum.voters is empty, but process.roles has broker "
          "without controller (a broker-only node needs the controllers to follow)");
    }
    if (voter) {
      return absl::InvalidArgumentError(fmt::format(
          "config error: controller.quorum.voters={}: node.id {} is one of the voters, but "
          "process.roles does not include controller (node ids are unique in a cluster)",
          config.Raw("controller.quorum.voters"), node_id));
    }
    return absl::OkStatus();
  }
  if (voters->empty() || voter) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "config error: controller.quorum.voters={}: node.id {} is not one of the voters, but "
      "process.roles includes controller (a controller must be a voter)",
      config.Raw("controller.quorum.voters"), node_id));
}

}  // namespace runnel::config
