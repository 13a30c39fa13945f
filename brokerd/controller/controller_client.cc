#include "brokerd/controller/controller_client.h"

#include <condition_variable>
#include <mutex>

#include "common/grpc/unix_server.h"
#include "common/log/log.h"

namespace runnel::brokerd {
namespace {

const log::ModuleLogger kLog("brokerd.controller");

}  // namespace

ControllerClient::ControllerClient(EventLoop& loop, const std::vector<std::string>& targets)
    : loop_(loop), targets_(targets) {
  for (const std::string& target : targets_) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetMaxSendMessageSize(256 << 20);
    // A controller that restarts or takes over is back within a second or two; gRPC's
    // default reconnect backoff (1 s growing to 120 s) would keep its channel failing long
    // after that.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    channels_.push_back(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
    stubs_.push_back(runnel::controller::ControllerService::NewStub(channels_.back()));
  }
}

runnel::controller::ControllerService::Stub& ControllerClient::PickStub() {
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (channels_[i]->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_TRANSIENT_FAILURE) {
      return *stubs_[i];
    }
  }
  return *stubs_[rotate_.fetch_add(1) % stubs_.size()];
}

ControllerClient::~ControllerClient() { Stop(); }

#define RUNNEL_ASYNC_CALL(Method, ReqT, RespT, request, timeout, done)                             \
  StartUnaryCall<ReqT, RespT>(loop_, inflight_, request, timeout, std::move(done),                 \
                              [this](auto&&... args) {                                             \
                                PickStub().async()->Method(std::forward<decltype(args)>(args)...); \
                              })

void ControllerClient::CreateTopics(const runnel::controller::CreateTopicsRequest& req,
                                    std::chrono::milliseconds timeout,
                                    Done<runnel::controller::CreateTopicsResponse> done) {
  RUNNEL_ASYNC_CALL(CreateTopics, runnel::controller::CreateTopicsRequest,
                    runnel::controller::CreateTopicsResponse, req, timeout, done);
}

void ControllerClient::DeleteTopics(const runnel::controller::DeleteTopicsRequest& req,
                                    std::chrono::milliseconds timeout,
                                    Done<runnel::controller::DeleteTopicsResponse> done) {
  RUNNEL_ASYNC_CALL(DeleteTopics, runnel::controller::DeleteTopicsRequest,
                    runnel::controller::DeleteTopicsResponse, req, timeout, done);
}

void ControllerClient::DescribeCluster(std::chrono::milliseconds timeout,
                                       Done<runnel::controller::DescribeClusterResponse> done) {
  RUNNEL_ASYNC_CALL(DescribeCluster, runnel::controller::DescribeClusterRequest,
                    runnel::controller::DescribeClusterResponse,
                    runnel::controller::DescribeClusterRequest(), timeout, done);
}

void ControllerClient::DescribeQuorum(std::chrono::milliseconds timeout,
                                      Done<runnel::controller::DescribeQuorumResponse> done) {
  RUNNEL_ASYNC_CALL(DescribeQuorum, runnel::controller::DescribeQuorumRequest,
                    runnel::controller::DescribeQuorumResponse,
                    runnel::controller::DescribeQuorumRequest(), timeout, done);
}

void ControllerClient::CreatePartitions(const runnel::controller::CreatePartitionsRequest& req,
                                        std::chrono::milliseconds timeout,
                                        Done<runnel::controller::CreatePartitionsResponse> done) {
  RUNNEL_ASYNC_CALL(CreatePartitions, runnel::controller::CreatePartitionsRequest,
                    runnel::controller::CreatePartitionsResponse, req, timeout, done);
}

void ControllerClient::AlterConfigs(const runnel::controller::AlterConfigsRequest& req,
                                    std::chrono::milliseconds timeout,
                                    Done<runnel::controller::AlterConfigsResponse> done) {
  RUNNEL_ASYNC_CALL(AlterConfigs, runnel::controller::AlterConfigsRequest,
                    runnel::controller::AlterConfigsResponse, req, timeout, done);
}

void ControllerClient::UpdateFeatures(const runnel::controller::UpdateFeaturesRequest& req,
                                      std::chrono::milliseconds timeout,
                                      Done<runnel::controller::UpdateFeaturesResponse> done) {
  RUNNEL_ASYNC_CALL(UpdateFeatures, runnel::controller::UpdateFeaturesRequest,
                    runnel::controller::UpdateFeaturesResponse, req, timeout, done);
}

void ControllerClient::RegisterBroker(const runnel::controller::RegisterBrokerRequest& req,
                                      std::chrono::milliseconds timeout,
                                      Done<runnel::controller::RegisterBrokerResponse> done) {
  RUNNEL_ASYNC_CALL(RegisterBroker, runnel::controller::RegisterBrokerRequest,
                    runnel::controller::RegisterBrokerResponse, req, timeout, done);
}

void ControllerClient::BrokerHeartbeat(const runnel::controller::BrokerHeartbeatRequest& req,
                                       std::chrono::milliseconds timeout,
                                       Done<runnel::controller::BrokerHeartbeatResponse> done) {
  RUNNEL_ASYNC_CALL(BrokerHeartbeat, runnel::controller::BrokerHeartbeatRequest,
                    runnel::controller::BrokerHeartbeatResponse, req, timeout, done);
}

void ControllerClient::AllocateProducerIds(
    const runnel::controller::AllocateProducerIdsRequest& req, std::chrono::milliseconds timeout,
    Done<runnel::controller::AllocateProducerIdsResponse> done) {
  RUNNEL_ASYNC_CALL(AllocateProducerIds, runnel::controller::AllocateProducerIdsRequest,
                    runnel::controller::AllocateProducerIdsResponse, req, timeout, done);
}

#undef RUNNEL_ASYNC_CALL

grpc::Status ControllerClient::RegisterBrokerBlocking(
    const runnel::controller::RegisterBrokerRequest& req, const std::atomic<bool>& stop,
    runnel::controller::RegisterBrokerResponse* resp) {
  grpc::Status status;
  std::chrono::milliseconds backoff(50);
  const auto started = std::chrono::steady_clock::now();
  auto next_warning = started + std::chrono::seconds(10);
  for (int attempt = 0;; ++attempt) {
    // Asynchronous, so that a stop cancels an attempt stuck waiting for a quorum leader.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    std::mutex call_mu;
    std::condition_variable call_cv;
    bool call_done = false;
    PickStub().async()->RegisterBroker(&ctx, &req, resp, [&](grpc::Status s) {
      std::lock_guard call_lock(call_mu);
      status = std::move(s);
      call_done = true;
      call_cv.notify_all();
    });
    {
      std::unique_lock call_lock(call_mu);
      bool cancelled = false;
      while (!call_done) {
        call_cv.wait_for(call_lock, std::chrono::milliseconds(100));
        if (!cancelled && (stop.load() || watch_.Stopping())) {
          cancelled = true;
          ctx.TryCancel();  // the callback still runs, and is waited for
        }
      }
    }
    if (status.ok() || stop.load() || watch_.Stopping()) return status;
    // The first failures are the usual start-up race; then a line every 30 s.
    auto now = std::chrono::steady_clock::now();
    if (attempt == 0) {
      kLog()->info("controller not reachable yet ({}); retrying", status.error_message());
    } else if (now >= next_warning) {
      next_warning = now + std::chrono::seconds(30);
      kLog()->warn("still no controller quorum to register with after {} s ({}); retrying",
                   std::chrono::duration_cast<std::chrono::seconds>(now - started).count(),
                   status.error_message());
    }
    // A signal handler sets `stop` and cannot notify: look at it every 100 ms. Stop() ends
    // the pause at once.
    const auto retry_at = now + backoff;
    while (std::chrono::steady_clock::now() < retry_at) {
      if (stop.load() || !watch_.Pause(std::chrono::milliseconds(100))) return status;
    }
    if (watch_.Stopping() || stop.load()) return status;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

void ControllerClient::StartWatch(
    std::function<void(const runnel::controller::MetadataUpdate&)> apply) {
  apply_ = std::move(apply);
  watch_.Start([this] { WatchLoop(); });
}

void ControllerClient::Stop() {
  watch_.Stop();
  inflight_->CancelAndWait();
}

void ControllerClient::WatchLoop() {
  std::chrono::milliseconds backoff(50);
  // The controller the stream is read from: the most preferred one first; after a stream
  // that brought nothing (that controller is down or still starting), the next one.
  size_t target = 0;
  while (true) {
    grpc::ClientContext ctx;
    if (!watch_.Attach(&ctx)) return;
    runnel::controller::WatchRequest req;
    req.set_from_offset(next_offset_.load());
    auto reader = stubs_[target]->WatchMetadata(&ctx, req);
    auto update = std::make_shared<runnel::controller::MetadataUpdate>();
    bool got_any = false;
    while (reader->Read(update.get())) {
      got_any = true;
      // Updates arrive in log order, so the next one needed follows the last one read.
      next_offset_.store(std::max<int64_t>(update->offset() + 1, 0));
      loop_.Post([this, update] { apply_(*update); });
      update = std::make_shared<runnel::controller::MetadataUpdate>();
    }
    grpc::Status status = reader->Finish();
    if (!watch_.Detach()) return;
    kLog()->info("metadata watch on {} ended ({}); reconnecting", targets_[target],
                 status.error_message());
    if (got_any) {
      backoff = std::chrono::milliseconds(50);
      target = 0;
    } else {
      target = (target + 1) % stubs_.size();
      // Every controller tried once without luck: wait before the next round.
      if (target != 0) continue;
    }
    if (!watch_.Pause(backoff)) return;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace runnel::brokerd
