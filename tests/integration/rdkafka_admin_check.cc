// A librdkafka (C and C++ API) client that checks topic administration against a running
// node: `rdkafka_admin_check <bootstrap>`. Exits 0 when every check passed, else prints
// the failed check and exits 1. Driven by test_rdkafka.py.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  fprintf(stderr, "%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

struct TopicSpec {
  std::string name;
  int partitions;
  int replication;
  std::map<std::string, std::string> configs;
};

// Creates the topics with the C admin API; returns each topic's error code.
std::map<std::string, rd_kafka_resp_err_t> CreateTopics(rd_kafka_t* rk,
                                                        const std::vector<TopicSpec>& specs,
                                                        bool validate_only = false) {
  char err[512];
  std::vector<rd_kafka_NewTopic_t*> topics;
  for (const TopicSpec& s : specs) {
    rd_kafka_NewTopic_t* t =
        rd_kafka_NewTopic_new(s.name.c_str(), s.partitions, s.replication, err, sizeof(err));
    for (const auto& [k, v] : s.configs) rd_kafka_NewTopic_set_config(t, k.c_str(), v.c_str());
    topics.push_back(t);
  }
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_AdminOptions_t* opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
  rd_kafka_AdminOptions_set_operation_timeout(opts, 20000, err, sizeof(err));
  if (validate_only) rd_kafka_AdminOptions_set_validate_only(opts, 1, err, sizeof(err));
  rd_kafka_CreateTopics(rk, topics.data(), topics.size(), opts, q);
  std::map<std::string, rd_kafka_resp_err_t> out;
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30000);
  if (ev == nullptr) {
    Check(false, "CreateTopics answered within 30 s");
  } else if (rd_kafka_event_error(ev)) {
    Check(false, std::string("CreateTopics request: ") + rd_kafka_event_error_string(ev));
  } else {
    size_t n = 0;
    const rd_kafka_topic_result_t** res =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    for (size_t i = 0; i < n; ++i) {
      out[rd_kafka_topic_result_name(res[i])] = rd_kafka_topic_result_error(res[i]);
    }
  }
  if (ev) rd_kafka_event_destroy(ev);
  rd_kafka_AdminOptions_destroy(opts);
  rd_kafka_queue_destroy(q);
  rd_kafka_NewTopic_destroy_array(topics.data(), topics.size());
  return out;
}

std::map<std::string, rd_kafka_resp_err_t> DeleteTopics(rd_kafka_t* rk,
                                                        const std::vector<std::string>& names) {
  std::vector<rd_kafka_DeleteTopic_t*> topics;
  for (const auto& n : names) topics.push_back(rd_kafka_DeleteTopic_new(n.c_str()));
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_DeleteTopics(rk, topics.data(), topics.size(), nullptr, q);
  std::map<std::string, rd_kafka_resp_err_t> out;
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30000);
  if (ev != nullptr && !rd_kafka_event_error(ev)) {
    size_t n = 0;
    const rd_kafka_topic_result_t** res =
        rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &n);
    for (size_t i = 0; i < n; ++i) {
      out[rd_kafka_topic_result_name(res[i])] = rd_kafka_topic_result_error(res[i]);
    }
  } else {
    Check(false, "DeleteTopics answered");
  }
  if (ev) rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(q);
  rd_kafka_DeleteTopic_destroy_array(topics.data(), topics.size());
  return out;
}

// Topic name -> partition count, through the C++ API's metadata call.
std::map<std::string, int> ListTopics(RdKafka::Producer* producer, int32_t* broker_id,
                                      std::string* broker_host) {
  RdKafka::Metadata* md = nullptr;
  std::map<std::string, int> out;
  if (producer->metadata(true, nullptr, &md, 10000) != RdKafka::ERR_NO_ERROR) {
    Check(false, "metadata request");
    return out;
  }
  for (const auto* t : *md->topics()) out[t->topic()] = static_cast<int>(t->partitions()->size());
  if (!md->brokers()->empty()) {
    *broker_id = (*md->brokers())[0]->id();
    *broker_host = (*md->brokers())[0]->host() + ":" + std::to_string((*md->brokers())[0]->port());
  }
  delete md;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: rdkafka_admin_check <bootstrap>\n");
    return 2;
  }
  std::string errstr;
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  conf->set("bootstrap.servers", argv[1], errstr);
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), errstr));
  if (!producer) {
    fprintf(stderr, "cannot create producer: %s\n", errstr.c_str());
    return 1;
  }
  rd_kafka_t* rk = producer->c_ptr();

  auto created = CreateTopics(rk, {{"rd-orders", 12, 1, {{"retention.ms", "86400000"}}},
                                   {"rd-events", 4, 1, {}},
                                   {"rd-temp", 1, 1, {}}});
  Check(created.size() == 3, "three create results");
  for (const auto& [name, err] : created) {
    Check(err == RD_KAFKA_RESP_ERR_NO_ERROR, "created " + name + ": " + rd_kafka_err2name(err));
  }

  int32_t broker_id = -1;
  std::string broker_host;
  auto topics = ListTopics(producer.get(), &broker_id, &broker_host);
  Check(broker_id == 1, "metadata names broker 1");
  Check(topics["rd-orders"] == 12, "rd-orders has 12 partitions");
  Check(topics["rd-events"] == 4, "rd-events has 4 partitions");
  Check(topics.count("rd-temp") == 1, "rd-temp listed");

  auto again = CreateTopics(rk, {{"rd-orders", 1, 1, {}},
                                 {"bad name!", 1, 1, {}},
                                 {"rd-zero", 0, 1, {}},
                                 {"rd-rf", 1, 2, {}},
                                 {"rd-cfg", 1, 1, {{"cleanup.policy", "shred"}}},
                                 {"rd-unknown-cfg", 1, 1, {{"no.such.config", "1"}}}});
  Check(again["rd-orders"] == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS, "TOPIC_ALREADY_EXISTS");
  Check(again["bad name!"] == RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, "INVALID_TOPIC_EXCEPTION");
  Check(again["rd-zero"] == RD_KAFKA_RESP_ERR_INVALID_PARTITIONS, "INVALID_PARTITIONS");
  Check(again["rd-rf"] == RD_KAFKA_RESP_ERR_INVALID_REPLICATION_FACTOR,
        "INVALID_REPLICATION_FACTOR");
  Check(again["rd-cfg"] == RD_KAFKA_RESP_ERR_INVALID_CONFIG, "INVALID_CONFIG for a bad value");
  Check(again["rd-unknown-cfg"] == RD_KAFKA_RESP_ERR_INVALID_CONFIG,
        "INVALID_CONFIG for an unknown key");

  auto dry = CreateTopics(rk, {{"rd-dry", 3, 1, {}}}, /*validate_only=*/true);
  Check(dry["rd-dry"] == RD_KAFKA_RESP_ERR_NO_ERROR, "validate_only succeeds");

  auto deleted = DeleteTopics(rk, {"rd-temp", "rd-never"});
  Check(deleted["rd-temp"] == RD_KAFKA_RESP_ERR_NO_ERROR, "rd-temp deleted");
  Check(deleted["rd-never"] == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        "deleting an unknown topic: UNKNOWN_TOPIC_OR_PARTITION");

  topics = ListTopics(producer.get(), &broker_id, &broker_host);
  Check(topics.count("rd-temp") == 0, "rd-temp gone");
  Check(topics.count("rd-dry") == 0, "validate_only created nothing");
  Check(topics.count("rd-orders") == 1 && topics.count("rd-events") == 1, "others kept");
  Check(topics.size() == 2, "exactly two topics left");

  fprintf(stderr, "%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
