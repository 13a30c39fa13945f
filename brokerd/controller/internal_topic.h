// Creating an internal topic a coordinator keeps its state in (__consumer_offsets,
// __transaction_state) the first time a client looks for its coordinator, as Kafka does.
//
// Ensure answers NONE at once when the topic exists. Otherwise, when fewer unfenced brokers
// than the replication factor exist, COORDINATOR_NOT_AVAILABLE (Kafka's rule: the client
// retries until enough brokers are up); else it asks the controller to create the topic
// and answers once the topic is in this broker's metadata, or COORDINATOR_NOT_AVAILABLE
// when creation failed. Callers arriving while a creation is in flight wait for it.
//
// Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/error_code.h"

namespace runnel::brokerd {

struct BrokerContext;

class InternalTopic {
 public:
  struct Spec {
    int32_t partitions = 1;
    int32_t replication_factor = 1;
    std::vector<std::pair<std::string, std::string>> configs;
  };
  // `spec` is read at each creation (the node config keys it comes from).
  InternalTopic(BrokerContext& broker, std::string name, std::function<Spec()> spec);

  const std::string& name() const { return name_; }
  void Ensure(std::function<void(protocol::ErrorCode)> done);

 private:
  void Finish(protocol::ErrorCode error);

  BrokerContext& broker_;
  std::string name_;
  std::function<Spec()> spec_;
  bool in_flight_ = false;
  std::vector<std::function<void(protocol::ErrorCode)>> waiters_;
};

}  // namespace runnel::brokerd
