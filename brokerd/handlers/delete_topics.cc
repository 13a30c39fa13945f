// DeleteTopics (key 20), v1-v6: by name (v1-v5) or by name or id (v6), done by controllerd.
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::DeleteTopicsRequest;
using protocol::DeleteTopicsResponse;
namespace ctl = runnel::controller;

}  // namespace

void HandleDeleteTopics(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                        Respond respond) {
  DeleteTopicsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  ctl::DeleteTopicsRequest call;
  if (ctx->header.api_version >= 6) {
    for (const auto& t : req.topics) {
      ctl::DeleteTopicState* s = call.add_topics();
      if (t.name.has_value()) s->set_name(*t.name);
      if (!t.topic_id.IsZero()) s->set_topic_id(t.topic_id.ToByteString());
    }
  } else {
    for (const auto& name : req.topic_names) call.add_topics()->set_name(name);
  }
  if (call.topics().empty()) return respond(EncodeResponse(*ctx, DeleteTopicsResponse()));

  const int64_t timeout_ms = std::max<int32_t>(req.timeout_ms, 0);
  const auto call_timeout = std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 5000));
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  broker.controller.DeleteTopics(
      call, call_timeout,
      [&broker, shared_ctx, call, respond, timeout_ms](const grpc::Status& status,
                                                       const ctl::DeleteTopicsResponse& result) {
        auto resp = std::make_shared<DeleteTopicsResponse>();
        auto deleted = std::make_shared<std::vector<std::string>>();
        if (!status.ok()) {
          KafkaLog()->warn("DeleteTopics: controller call failed: {}", status.error_message());
          for (const auto& t : call.topics()) {
            DeleteTopicsResponse::DeletableTopicResult r;
            if (!t.name().empty()) r.name = t.name();
            r.topic_id = UuidFromBytes(t.topic_id());
            r.error_code = ControllerCallError(status);
            r.error_message = status.error_message();
            resp->responses.push_back(std::move(r));
          }
        } else {
          for (const auto& t : result.topics()) {
            DeleteTopicsResponse::DeletableTopicResult r;
            if (!t.name().empty()) r.name = t.name();
            r.topic_id = UuidFromBytes(t.topic_id());
            r.error_code = protocol::ErrorFromWire(t.error_code());
            if (t.has_error_message()) r.error_message = t.error_message();
            if (t.error_code() == 0) deleted->push_back(t.name());
            resp->responses.push_back(std::move(r));
          }
        }
        WaitForMetadata(
            broker,
            [&broker, deleted] {
              for (const auto& name : *deleted) {
                if (broker.metadata.FindTopic(name) != nullptr) return false;
              }
              return true;
            },
            timeout_ms,
            [shared_ctx, resp, respond] { respond(EncodeResponse(*shared_ctx, *resp)); });
      });
}

}  // namespace runnel::brokerd
