// The gRPC face of runnel-storaged (proto/runnel/storage.proto).
#pragma once

#include "proto/runnel/storage.grpc.pb.h"
#include "storaged/log_dirs.h"

namespace runnel::storaged {

class StorageServiceImpl final : public runnel::storage::StorageService::Service {
 public:
  explicit StorageServiceImpl(const LogDirs& dirs) : dirs_(dirs) {}

  grpc::Status DescribeLogDirs(grpc::ServerContext* ctx,
                               const runnel::storage::DescribeLogDirsRequest* req,
                               runnel::storage::DescribeLogDirsResponse* resp) override;

 private:
  const LogDirs& dirs_;
};

}  // namespace runnel::storaged
