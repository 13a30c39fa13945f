#include "controllerd/controller_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "common/log/log.h"
#include "controllerd/raft_transport.h"

namespace runnel::controllerd {
namespace {

// How often a waiting WatchMetadata stream looks whether its client went away.
constexpr std::chrono::milliseconds kWatchPoll{200};
// Longest pause before a forwarded call is retried when the leader did not change.
constexpr std::chrono::milliseconds kRetryPause{100};
// Marks a call forwarded by another controller (value: its node id): never forwarded again.
constexpr char kForwardedHeader[] = "runnel-forwarded-by";

// Every gRPC callback is an entry point: an exception fails only this call.
template <typename Fn>
grpc::Status Guard(const char* method, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    log::Get("controllerd.grpc")->error("{} failed: {}", method, e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string(method) + ": " + e.what());
  } catch (...) {
    log::Get("controllerd.grpc")->error("{} failed with an unknown exception", method);
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string(method) + " failed");
  }
}

template <typename T>
grpc::Status Answer(StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpc(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

template <typename Response>
int64_t MetadataOffset(const Response& r) {
  return r.metadata_offset();
}

}  // namespace

ControllerServiceImpl::ControllerServiceImpl(Controller& controller,
                                             std::map<int32_t, std::string> peers)
    : controller_(controller), peers_(std::move(peers)) {}

ControllerServiceImpl::~ControllerServiceImpl() = default;

ControllerServiceImpl::Stub* ControllerServiceImpl::StubFor(int32_t id) {
  auto address = peers_.find(id);
  if (address == peers_.end()) return nullptr;
  MutexLock lock(&mu_);
  std::unique_ptr<Stub>& stub = stubs_[id];
  if (!stub) stub = controller::ControllerService::NewStub(PeerChannel(address->second));
  return stub.get();
}

template <typename Request, typename Response>
grpc::Status ControllerServiceImpl::Route(grpc::ServerContext* context, const Request& request,
                                          Response* response,
                                          const std::function<StatusOr<Response>(Deadline)>& local,
                                          Remote<Request, Response> remote,
                                          int64_t (*applied)(const Response&)) {
  // The caller's deadline, as a steady-clock one for waits and a system one to pass on.
  const auto system_now = std::chrono::system_clock::now();
  const auto steady_now = std::chrono::steady_clock::now();
  auto system_deadline = context->deadline();
  const auto cap = std::chrono::milliseconds(30000);
  if (system_deadline - system_now > cap) system_deadline = system_now + cap;
  const Deadline deadline = steady_now + std::chrono::duration_cast<std::chrono::milliseconds>(
                                             system_deadline - system_now);
  const auto& metadata = context->client_metadata();
  const bool forwarded = metadata.find(kForwardedHeader) != metadata.end();
  const int32_t self = controller_.node_id();
  Quorum& quorum = controller_.quorum();
  auto pause_until = [&] {
    return std::min(deadline, std::chrono::steady_clock::now() + kRetryPause);
  };

  grpc::Status last(grpc::StatusCode::UNAVAILABLE,
                    "no controller quorum leader was known within the deadline");
  while (true) {
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    if (std::chrono::steady_clock::now() >= deadline) return last;
    const int32_t leader = quorum.Leader();
    if (peers_.empty() || leader == self) {
      StatusOr<Response> result = local(deadline);
      if (result.ok() || !IsNotLeader(result.status())) return Answer(std::move(result), response);
      // The leadership moved before the write started: nothing was written.
      last = grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(result.status().message()));
      if (forwarded) return last;  // the forwarding controller picks the leader again
      quorum.WaitFor([&](const QuorumState& s) { return s.leader != leader; }, pause_until());
      continue;
    }
    if (forwarded) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          fmt::format("controller {} does not lead the quorum{}", self,
                      leader == raft::kNoNode ? std::string()
                                              : fmt::format("; controller {} does", leader)));
    }
    if (leader == raft::kNoNode) {
      quorum.WaitFor([](const QuorumState& s) { return s.leader != raft::kNoNode; }, deadline);
      continue;
    }
    Stub* stub = StubFor(leader);
    if (stub == nullptr) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          fmt::format("controller {} leads, but it is not in "
                                      "controller.quorum.voters here",
                                      leader));
    }
    grpc::ClientContext call;
    call.set_deadline(system_deadline);
    call.AddMetadata(kForwardedHeader, std::to_string(self));
    response->Clear();
    grpc::Status status = (stub->*remote)(&call, request, response);
    if (status.ok()) {
      // Answer once this node's image (and so its watchers) has the write too.
      if (applied != nullptr && applied(*response) >= 0) {
        quorum.WaitApplied(applied(*response), deadline);
      }
      return status;
    }
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    // The leader is gone or no longer leads: retry with the next one.
    last = grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        fmt::format("controller {} (the last known leader): {}", leader, status.error_message()));
    quorum.WaitFor([&](const QuorumState& s) { return s.leader != leader; }, pause_until());
  }
}

grpc::Status ControllerServiceImpl::CreateTopics(grpc::ServerContext* context,
                                                 const controller::CreateTopicsRequest* request,
                                                 controller::CreateTopicsResponse* response) {
  return Guard("CreateTopics", [&] {
    return Route<controller::CreateTopicsRequest, controller::CreateTopicsResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.CreateTopics(*request, d); }, &Stub::CreateTopics,
        &MetadataOffset<controller::CreateTopicsResponse>);
  });
}

grpc::Status ControllerServiceImpl::DeleteTopics(grpc::ServerContext* context,
                                                 const controller::DeleteTopicsRequest* request,
                                                 controller::DeleteTopicsResponse* response) {
  return Guard("DeleteTopics", [&] {
    return Route<controller::DeleteTopicsRequest, controller::DeleteTopicsResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.DeleteTopics(*request, d); }, &Stub::DeleteTopics,
        &MetadataOffset<controller::DeleteTopicsResponse>);
  });
}

grpc::Status ControllerServiceImpl::RegisterBroker(grpc::ServerContext* context,
                                                   const controller::RegisterBrokerRequest* request,
                                                   controller::RegisterBrokerResponse* response) {
  return Guard("RegisterBroker", [&] {
    return Route<controller::RegisterBrokerRequest, controller::RegisterBrokerResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.RegisterBroker(*request, d); }, &Stub::RegisterBroker,
        &MetadataOffset<controller::RegisterBrokerResponse>);
  });
}

grpc::Status ControllerServiceImpl::DescribeCluster(
    grpc::ServerContext* context, const controller::DescribeClusterRequest* request,
    controller::DescribeClusterResponse* response) {
  // Linearizable: the leader answers after a read-index round; a follower forwards, then
  // waits until its own image has what the answer shows.
  return Guard("DescribeCluster", [&] {
    return Route<controller::DescribeClusterRequest, controller::DescribeClusterResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.DescribeClusterLinearizable(d); },
        &Stub::DescribeCluster, &MetadataOffset<controller::DescribeClusterResponse>);
  });
}

grpc::Status ControllerServiceImpl::CreatePartitions(
    grpc::ServerContext* context, const controller::CreatePartitionsRequest* request,
    controller::CreatePartitionsResponse* response) {
  return Guard("CreatePartitions", [&] {
    return Route<controller::CreatePartitionsRequest, controller::CreatePartitionsResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.CreatePartitions(*request, d); },
        &Stub::CreatePartitions, &MetadataOffset<controller::CreatePartitionsResponse>);
  });
}

grpc::Status ControllerServiceImpl::AlterConfigs(grpc::ServerContext* context,
                                                 const controller::AlterConfigsRequest* request,
                                                 controller::AlterConfigsResponse* response) {
  return Guard("AlterConfigs", [&] {
    return Route<controller::AlterConfigsRequest, controller::AlterConfigsResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.AlterConfigs(*request, d); }, &Stub::AlterConfigs,
        &MetadataOffset<controller::AlterConfigsResponse>);
  });
}

grpc::Status ControllerServiceImpl::DescribeQuorum(grpc::ServerContext* context,
                                                   const controller::DescribeQuorumRequest* request,
                                                   controller::DescribeQuorumResponse* response) {
  return Guard("DescribeQuorum", [&] {
    return Route<controller::DescribeQuorumRequest, controller::DescribeQuorumResponse>(
        context, *request, response,
        [&](Deadline d) -> StatusOr<controller::DescribeQuorumResponse> {
          // A leader answers once it is ready (its no-op applied), so its counters are current.
          Status ready = controller_.quorum().WaitLeaderReady(d);
          if (!ready.ok()) return ready;
          return controller_.DescribeQuorum();
        },
        &Stub::DescribeQuorum, nullptr);
  });
}

grpc::Status ControllerServiceImpl::BrokerHeartbeat(
    grpc::ServerContext* context, const controller::BrokerHeartbeatRequest* request,
    controller::BrokerHeartbeatResponse* response) {
  return Guard("BrokerHeartbeat", [&] {
    return Route<controller::BrokerHeartbeatRequest, controller::BrokerHeartbeatResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.BrokerHeartbeat(*request, d); },
        &Stub::BrokerHeartbeat, &MetadataOffset<controller::BrokerHeartbeatResponse>);
  });
}

grpc::Status ControllerServiceImpl::AllocateProducerIds(
    grpc::ServerContext* context, const controller::AllocateProducerIdsRequest* request,
    controller::AllocateProducerIdsResponse* response) {
  return Guard("AllocateProducerIds", [&] {
    return Route<controller::AllocateProducerIdsRequest, controller::AllocateProducerIdsResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.AllocateProducerIds(*request, d); },
        &Stub::AllocateProducerIds, &MetadataOffset<controller::AllocateProducerIdsResponse>);
  });
}

grpc::Status ControllerServiceImpl::UpdateFeatures(grpc::ServerContext* context,
                                                   const controller::UpdateFeaturesRequest* request,
                                                   controller::UpdateFeaturesResponse* response) {
  return Guard("UpdateFeatures", [&] {
    return Route<controller::UpdateFeaturesRequest, controller::UpdateFeaturesResponse>(
        context, *request, response,
        [&](Deadline d) { return controller_.UpdateFeatures(*request, d); }, &Stub::UpdateFeatures,
        &MetadataOffset<controller::UpdateFeaturesResponse>);
  });
}

grpc::Status ControllerServiceImpl::WatchMetadata(
    grpc::ServerContext* context, const controller::WatchRequest* request,
    grpc::ServerWriter<controller::MetadataUpdate>* writer) {
  return Guard("WatchMetadata", [&]() -> grpc::Status {
    StatusOr<std::shared_ptr<Watcher>> watcher = controller_.Watch(request->from_offset());
    if (!watcher.ok()) return ToGrpc(watcher.status());
    grpc::Status result = grpc::Status::OK;
    while (true) {
      if (context->IsCancelled()) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away");
        break;
      }
      StatusOr<UpdatePtr> next = (*watcher)->Next(kWatchPoll);
      if (!next.ok()) {
        result = ToGrpc(next.status());
        break;
      }
      if (*next == nullptr) continue;
      if (!writer->Write(**next)) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "watcher stream broken");
        break;
      }
    }
    controller_.Unwatch(*watcher);
    return result;
  });
}

}  // namespace runnel::controllerd
