#include "brokerd/controller_client.h"

#include "common/grpc/unix_server.h"
#include "common/log/log.h"

namespace runnel::brokerd {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static auto logger = log::Get("brokerd.controller");
  return logger;
}

// One unary call's state, alive until its completion has run on the loop.
template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

}  // namespace

ControllerClient::ControllerClient(EventLoop& loop, const std::string& socket_path)
    : loop_(loop),
      channel_(grpcutil::UnixChannel(socket_path)),
      stub_(runnel::controller::ControllerService::NewStub(channel_)) {}

ControllerClient::~ControllerClient() { Stop(); }

#define RUNNEL_ASYNC_CALL(Method, ReqT, RespT, request, timeout, done)                     \
  do {                                                                                     \
    auto call = std::make_shared<Call<ReqT, RespT>>();                                     \
    call->req = request;                                                                   \
    call->ctx.set_deadline(std::chrono::system_clock::now() + (timeout));                  \
    EventLoop* loop = &loop_;                                                              \
    stub_->async()->Method(&call->ctx, &call->req, &call->resp,                            \
                           [call, loop, done = std::move(done)](grpc::Status status) {     \
                             loop->Post([call, status, done] { done(status, call->resp); }); \
                           });                                                             \
  } while (0)

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

#undef RUNNEL_ASYNC_CALL

grpc::Status ControllerClient::RegisterBrokerBlocking(
    const runnel::controller::RegisterBrokerRequest& req,
    std::chrono::system_clock::time_point deadline,
    runnel::controller::RegisterBrokerResponse* resp) {
  grpc::Status status;
  std::chrono::milliseconds backoff(50);
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::min(deadline, std::chrono::system_clock::now() + std::chrono::seconds(5)));
    status = stub_->RegisterBroker(&ctx, req, resp);
    if (status.ok() || std::chrono::system_clock::now() + backoff >= deadline) return status;
    Log()->info("controller not reachable yet ({}); retrying", status.error_message());
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, backoff, [this] { return stopping_; })) return status;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

void ControllerClient::StartWatch(
    std::function<void(const runnel::controller::MetadataUpdate&)> apply) {
  apply_ = std::move(apply);
  watch_thread_ = std::thread([this] { WatchLoop(); });
}

void ControllerClient::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !watch_thread_.joinable()) return;
    stopping_ = true;
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
  }
  cv_.notify_all();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void ControllerClient::WatchLoop() {
  std::chrono::milliseconds backoff(50);
  while (true) {
    grpc::ClientContext ctx;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      watch_ctx_ = &ctx;
    }
    runnel::controller::WatchRequest req;
    req.set_from_offset(next_offset_.load());
    auto reader = stub_->WatchMetadata(&ctx, req);
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
    {
      std::lock_guard lock(mu_);
      watch_ctx_ = nullptr;
      if (stopping_) return;
    }
    if (got_any) backoff = std::chrono::milliseconds(50);
    Log()->info("metadata watch ended ({}); reconnecting", status.error_message());
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, backoff, [this] { return stopping_; })) return;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace runnel::brokerd
