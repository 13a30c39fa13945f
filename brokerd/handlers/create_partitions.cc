// CreatePartitions (key 37), v0-v3: validated and written by controllerd; answered once this
// broker's metadata cache shows the new partitions and their logs exist here (or the request's
// timeout passes).
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::CreatePartitionsRequest;
using protocol::CreatePartitionsResponse;
namespace ctl = runnel::controller;

ctl::CreatePartitionsRequest ToController(const CreatePartitionsRequest& req) {
  ctl::CreatePartitionsRequest out;
  out.set_validate_only(req.validate_only);
  for (const auto& t : req.topics) {
    ctl::CreatePartitionsTopic* topic = out.add_topics();
    topic->set_name(t.name);
    topic->set_count(t.count);
    // A null assignment list lets the controller place the partitions.
    if (t.assignments.has_value()) {
      topic->set_manual(true);
      for (const auto& a : *t.assignments) {
        ctl::PartitionAssignment* assignment = topic->add_assignments();
        for (NodeId b : a.broker_ids) assignment->add_broker_ids(b.value());
      }
    }
  }
  return out;
}

}  // namespace

void HandleCreatePartitions(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                            Respond respond) {
  CreatePartitionsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  if (req.topics.empty()) return respond(EncodeResponse(*ctx, CreatePartitionsResponse()));

  const int64_t timeout_ms = std::max<int32_t>(req.timeout_ms, 0);
  // The controller gets at least a moment even when the client asked for no wait.
  const auto call_timeout = std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 5000));
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  ctl::CreatePartitionsRequest call = ToController(req);
  broker.controller.CreatePartitions(
      call, call_timeout,
      [&broker, shared_ctx, call, respond, timeout_ms](
          const grpc::Status& status, const ctl::CreatePartitionsResponse& result) {
        auto resp = std::make_shared<CreatePartitionsResponse>();
        int64_t offset = -1;
        auto grown = std::make_shared<std::vector<std::string>>();
        if (!status.ok()) {
          KafkaLog()->warn("CreatePartitions: controller call failed: {}", status.error_message());
          for (const auto& t : call.topics()) {
            CreatePartitionsResponse::CreatePartitionsTopicResult r;
            r.name = t.name();
            r.error_code = ControllerCallError(status);
            r.error_message = status.error_message();
            resp->results.push_back(std::move(r));
          }
        } else {
          offset = result.metadata_offset();
          for (const auto& t : result.topics()) {
            CreatePartitionsResponse::CreatePartitionsTopicResult r;
            r.name = t.name();
            r.error_code = protocol::ErrorFromWire(t.error_code());
            if (t.has_error_message()) r.error_message = t.error_message();
            if (t.error_code() == 0 && !call.validate_only()) grown->push_back(t.name());
            resp->results.push_back(std::move(r));
          }
        }
        // Answer once the change is in this broker's cache and the new partitions' logs
        // exist, so the client's next Metadata shows them and produce finds them.
        WaitForMetadata(
            broker,
            [&broker, offset, grown] {
              if (broker.metadata.offset() < offset) return false;
              for (const auto& name : *grown) {
                const TopicInfo* topic = broker.metadata.FindTopic(name);
                if (topic != nullptr && !PartitionsReadyHere(broker, *topic)) return false;
              }
              return true;
            },
            timeout_ms,
            [shared_ctx, resp, respond] { respond(EncodeResponse(*shared_ctx, *resp)); });
      });
}

}  // namespace runnel::brokerd
