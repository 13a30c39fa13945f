// runnel.supervisor.SupervisorAdmin: the node's role states, for `runnel status`.
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/runnel/supervisor.grpc.pb.h"
#include "supervisor/supervisor.h"

namespace runnel::supervisor {

// Fills `out` from a snapshot; `supervisor_pid` is the supervisor's own pid.
void SnapshotToProto(const SupervisorSnapshot& snapshot, int supervisor_pid,
                     GetStatusResponse* out);

class AdminService final : public SupervisorAdmin::Service {
 public:
  // `supervisor` must outlive the service; only its thread-safe Status() is used.
  explicit AdminService(const Supervisor* supervisor) : supervisor_(supervisor) {}

  grpc::Status GetStatus(grpc::ServerContext* context, const GetStatusRequest* request,
                         GetStatusResponse* response) override;

 private:
  const Supervisor* supervisor_;
};

}  // namespace runnel::supervisor
