// Metadata records for tests that fill a MetadataCache: topic ids, brokers, topics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/runnel/controller.pb.h"

namespace runnel::brokerd::metadata_records {

// The 16-byte topic id ending in `b`.
inline std::string Id(uint8_t b) { return std::string(15, '\0') + static_cast<char>(b); }

// Broker `id` with one endpoint on `listener`.
inline void AddBroker(runnel::controller::MetadataUpdate& u, int32_t id,
                      const std::string& listener, bool fenced) {
  auto* b = u.add_records()->mutable_register_broker();
  b->set_broker_id(id);
  b->set_fenced(fenced);
  auto* ep = b->add_endpoints();
  ep->set_name(listener);
  ep->set_host("127.0.0.1");
  ep->set_port(9092 + id);
}

// Topic `name` with partitions 0..partitions-1, each on `replicas` (all in sync) led by
// `leader`, partition p at leader epoch p + 3.
inline void AddTopic(runnel::controller::MetadataUpdate& u, const std::string& name, uint8_t id,
                     int partitions, const std::vector<int32_t>& replicas = {1},
                     int32_t leader = 1) {
  auto* t = u.add_records()->mutable_topic();
  t->set_name(name);
  t->set_topic_id(Id(id));
  for (int p = 0; p < partitions; ++p) {
    auto* r = u.add_records()->mutable_partition();
    r->set_topic_id(Id(id));
    r->set_partition_id(p);
    for (int32_t b : replicas) r->add_replicas(b);
    for (int32_t b : replicas) r->add_isr(b);
    r->set_leader(leader);
    r->set_leader_epoch(p + 3);
  }
}

}  // namespace runnel::brokerd::metadata_records
