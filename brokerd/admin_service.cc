#include "brokerd/admin_service.h"

#include <chrono>
#include <future>

namespace runnel::brokerd {

grpc::Status BrokerAdminImpl::DescribeBroker(grpc::ServerContext*,
                                             const runnel::broker::DescribeBrokerRequest*,
                                             runnel::broker::DescribeBrokerResponse* resp) {
  auto state = std::make_shared<std::promise<runnel::broker::DescribeBrokerResponse>>();
  std::future<runnel::broker::DescribeBrokerResponse> result = state->get_future();
  loop_.Post([this, state] {
    runnel::broker::DescribeBrokerResponse r;
    r.set_node_id(node_id_);
    for (const auto& [name, port] : server_.bound_ports()) {
      auto* l = r.add_listeners();
      l->set_name(name);
      l->set_port(port);
    }
    r.set_connections(static_cast<int64_t>(server_.connection_count()));
    r.set_metadata_offset(metadata_.offset());
    r.set_topics(static_cast<int64_t>(metadata_.topics().size()));
    r.set_cluster_id(metadata_.cluster_id());
    state->set_value(std::move(r));
  });
  // A loop that is shutting down drops the read, which breaks the promise.
  try {
    if (result.wait_for(std::chrono::seconds(5)) == std::future_status::ready) {
      *resp = result.get();
      return grpc::Status::OK;
    }
  } catch (const std::future_error&) {
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the broker loop did not answer");
}

}  // namespace runnel::brokerd
