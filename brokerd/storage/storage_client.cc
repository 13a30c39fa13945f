#include "brokerd/storage/storage_client.h"

#include "common/grpc/unix_server.h"
#include "common/log/log.h"

namespace runnel::brokerd {
namespace {

const log::ModuleLogger kLog("brokerd.storage");

}  // namespace

StorageClient::StorageClient(EventLoop& loop, const std::string& socket_path)
    : loop_(loop),
      channel_(grpcutil::UnixChannel(socket_path)),
      stub_(storage::StorageService::NewStub(channel_)) {}

StorageClient::~StorageClient() { Stop(); }

#define RUNNEL_STORAGE_CALL(Method, ReqT, RespT)                                                 \
  void StorageClient::Method(ReqT req, std::chrono::milliseconds timeout, Done<RespT> done) {    \
    StartUnaryCall<ReqT, RespT>(loop_, inflight_, std::move(req), timeout, std::move(done),      \
                                [this](auto&&... args) {                                         \
                                  stub_->async()->Method(std::forward<decltype(args)>(args)...); \
                                });                                                              \
  }

RUNNEL_STORAGE_CALL(Append, storage::AppendRequest, storage::AppendResponse)
RUNNEL_STORAGE_CALL(Read, storage::ReadRequest, storage::ReadResponse)
RUNNEL_STORAGE_CALL(ListOffsets, storage::ListOffsetsRequest, storage::ListOffsetsResponse)
RUNNEL_STORAGE_CALL(DeleteRecords, storage::DeleteRecordsRequest, storage::DeleteRecordsResponse)
RUNNEL_STORAGE_CALL(OffsetsForLeaderEpoch, storage::OffsetsForLeaderEpochRequest,
                    storage::OffsetsForLeaderEpochResponse)
RUNNEL_STORAGE_CALL(DescribeProducers, storage::DescribeProducersRequest,
                    storage::DescribeProducersResponse)
RUNNEL_STORAGE_CALL(CreatePartitions, storage::PartitionsRequest, storage::PartitionsResponse)
RUNNEL_STORAGE_CALL(DeletePartitions, storage::PartitionsRequest, storage::PartitionsResponse)
RUNNEL_STORAGE_CALL(UpdatePartitionConfigs, storage::PartitionsRequest, storage::PartitionsResponse)
RUNNEL_STORAGE_CALL(GetPartitionStates, storage::GetPartitionStatesRequest,
                    storage::GetPartitionStatesResponse)

#undef RUNNEL_STORAGE_CALL

void StorageClient::DescribeLogDirs(std::chrono::milliseconds timeout,
                                    Done<storage::DescribeLogDirsResponse> done) {
  StartUnaryCall<storage::DescribeLogDirsRequest, storage::DescribeLogDirsResponse>(
      loop_, inflight_, storage::DescribeLogDirsRequest(), timeout, std::move(done),
      [this](auto&&... args) {
        stub_->async()->DescribeLogDirs(std::forward<decltype(args)>(args)...);
      });
}

void StorageClient::StartWatch(
    std::function<void(const storage::PartitionChange&, bool snapshot)> apply,
    std::function<void()> lost) {
  apply_ = std::move(apply);
  lost_ = std::move(lost);
  watch_.Start([this] { WatchLoop(); });
}

void StorageClient::Stop() {
  watch_.Stop();
  inflight_->CancelAndWait();
}

void StorageClient::WatchLoop() {
  std::chrono::milliseconds backoff(50);
  while (true) {
    grpc::ClientContext ctx;
    if (!watch_.Attach(&ctx)) return;
    auto reader = stub_->WatchPartitions(&ctx, storage::WatchPartitionsRequest());
    auto change = std::make_shared<storage::PartitionChange>();
    bool first = true;
    while (reader->Read(change.get())) {
      loop_.Post([this, change, first] { apply_(*change, first); });
      first = false;
      change = std::make_shared<storage::PartitionChange>();
    }
    grpc::Status status = reader->Finish();
    if (!watch_.Detach()) return;
    if (!first) {
      backoff = std::chrono::milliseconds(50);
      loop_.Post([this] { lost_(); });
      kLog()->warn("partition watch ended ({}); reconnecting", status.error_message());
    }
    if (!watch_.Pause(backoff)) return;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace runnel::brokerd
