// ListGroups (key 16), v0-v5: the groups of the __consumer_offsets partitions this broker
// leads (clients ask every broker and merge).
//
// v4+ filters by state (case-insensitive), v5 by type ("classic", "consumer"). A group
// holding only offsets is listed as Kafka lists it: an Empty classic group with no protocol
// type. While a shard is still loading the answer is COORDINATOR_LOAD_IN_PROGRESS, as
// Kafka's coordinator gives, so the client retries rather than miss groups.
#include <algorithm>
#include <cctype>
#include <set>

#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::ListGroupsRequest;
using protocol::ListGroupsResponse;

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string Trimmed(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

void HandleListGroups(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  ListGroupsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;

  std::set<std::string> states;
  std::set<std::string> types;
  if (version >= 4) {
    for (const std::string& s : req.states_filter) states.insert(Lower(Trimmed(s)));
  }
  if (version >= 5) {
    for (const std::string& t : req.types_filter) types.insert(Lower(Trimmed(t)));
  }

  ListGroupsResponse resp;
  for (group::Shard* shard : broker.groups.shards()) {
    if (shard->state() == group::Shard::State::kLoading) {
      ListGroupsResponse loading;
      loading.error_code = ErrorCode::kCoordinatorLoadInProgress;
      return respond(EncodeResponse(*ctx, loading));
    }
    if (shard->state() != group::Shard::State::kActive) continue;
    for (const auto& [id, slot] : shard->groups()) {
      ListGroupsResponse::ListedGroup g;
      g.group_id = id;
      if (slot.consumer) {
        g.protocol_type = "consumer";
        g.group_state = std::string(slot.consumer->StateName());
        g.group_type = "consumer";
      } else if (slot.classic) {
        g.protocol_type = slot.classic->protocol_type();
        g.group_state = std::string(slot.classic->StateName());
        g.group_type = "classic";
      } else {
        g.protocol_type = "";
        g.group_state = "Empty";
        g.group_type = "classic";
      }
      if (g.group_state == "Dead") continue;  // being removed
      if (!states.empty() && states.count(Lower(g.group_state)) == 0) continue;
      if (!types.empty() && types.count(g.group_type) == 0) continue;
      resp.groups.push_back(std::move(g));
    }
  }
  std::sort(resp.groups.begin(), resp.groups.end(),
            [](const auto& a, const auto& b) { return a.group_id < b.group_id; });
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
