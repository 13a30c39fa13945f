#include "supervisor/admin_service.h"

#include <unistd.h>

#include <exception>

#include "common/log/log.h"

namespace runnel::supervisor {
namespace {

RoleStatus::State ToProto(RoleState state) {
  switch (state) {
    case RoleState::kStarting:
      return RoleStatus::STARTING;
    case RoleState::kServing:
      return RoleStatus::SERVING;
    case RoleState::kBackoff:
      return RoleStatus::BACKOFF;
    case RoleState::kStopping:
      return RoleStatus::STOPPING;
    case RoleState::kStopped:
      return RoleStatus::STOPPED;
  }
  return RoleStatus::STATE_UNSPECIFIED;
}

GetStatusResponse::Phase ToProto(Phase phase) {
  switch (phase) {
    case Phase::kStarting:
      return GetStatusResponse::STARTING;
    case Phase::kRunning:
      return GetStatusResponse::RUNNING;
    case Phase::kStopping:
    case Phase::kDone:
      return GetStatusResponse::STOPPING;
  }
  return GetStatusResponse::PHASE_UNSPECIFIED;
}

}  // namespace

void SnapshotToProto(const SupervisorSnapshot& snapshot, int supervisor_pid,
                     GetStatusResponse* out) {
  out->set_supervisor_pid(supervisor_pid);
  out->set_supervisor_uptime_ms(snapshot.uptime.count());
  out->set_phase(ToProto(snapshot.phase));
  for (const RoleSnapshot& r : snapshot.roles) {
    RoleStatus* s = out->add_roles();
    s->set_name(r.name);
    s->set_pid(r.pid);
    s->set_state(ToProto(r.state));
    s->set_uptime_ms(r.uptime.count());
    s->set_restarts(r.restarts);
    s->set_last_exit(r.last_exit);
  }
}

grpc::Status AdminService::GetStatus(grpc::ServerContext* context, const GetStatusRequest* request,
                                     GetStatusResponse* response) {
  try {
    SnapshotToProto(supervisor_->Status(), static_cast<int>(::getpid()), response);
    return grpc::Status::OK;
  } catch (const std::exception& e) {
    log::Get("supervisor")->error("GetStatus failed: {}", e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

}  // namespace runnel::supervisor
