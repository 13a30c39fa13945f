#include "storaged/storage_service.h"

namespace runnel::storaged {

grpc::Status StorageServiceImpl::DescribeLogDirs(grpc::ServerContext*,
                                                 const runnel::storage::DescribeLogDirsRequest*,
                                                 runnel::storage::DescribeLogDirsResponse* resp) {
  resp->set_node_id(dirs_.node_id());
  for (const LogDirState& d : dirs_.dirs()) {
    runnel::storage::LogDir* out = resp->add_dirs();
    out->set_path(d.path);
    out->set_directory_id(d.directory_id);
    StatusOr<DiskUsage> usage = LogDirs::Usage(d.path);
    if (usage.ok()) {
      out->set_total_bytes(usage->total_bytes);
      out->set_usable_bytes(usage->usable_bytes);
    } else {
      out->set_error(std::string(usage.status().message()));
    }
  }
  return grpc::Status::OK;
}

}  // namespace runnel::storaged
