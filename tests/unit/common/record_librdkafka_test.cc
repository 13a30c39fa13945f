// Interop: batches written by a real Kafka client (librdkafka) decode and validate here.
//
// librdkafka produces to its built-in mock cluster, which stores each batch as received (only
// the base offset rewritten); the test then fetches the raw bytes with a plain Fetch v4 request
// encoded by our codec, so what is checked is librdkafka's own framing for every codec.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/protocol/header.h"
#include "common/protocol/messages/fetch.h"
#include "common/record/batch.h"

namespace runnel::record {
namespace {

constexpr int kMessages = 20;
constexpr int64_t kBaseTimestamp = 1700000000000;

std::string KeyOf(int i) { return "key-" + std::to_string(i); }
// Values repeat a pattern so every codec has something to compress.
std::string ValueOf(int i) { return std::string(100 + i, static_cast<char>('a' + i % 26)); }

// Connects to "host:port" with a receive timeout, so a silent server fails the test.
int Connect(const std::string& hostport) {
  const size_t colon = hostport.rfind(':');
  const std::string host = hostport.substr(0, colon);
  const std::string port = hostport.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return -1;
  int fd = socket(res->ai_family, res->ai_socktype, 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

bool ReadExact(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t got = read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// Fetches partition 0 of `topic` from offset 0 and returns the raw records bytes.
std::vector<uint8_t> FetchRaw(const std::string& bootstrap, const std::string& topic) {
  using namespace protocol;
  constexpr int16_t kVersion = 4;
  FetchRequest request;
  request.max_wait_ms = 0;
  request.min_bytes = 1;
  request.max_bytes = 8 << 20;
  FetchRequest::FetchTopic t;
  t.topic = topic;
  FetchRequest::FetchPartition p;
  p.partition = 0;
  p.fetch_offset = 0;
  p.partition_max_bytes = 8 << 20;
  t.partitions.push_back(p);
  request.topics.push_back(t);
  RequestHeader header;
  header.api_key = FetchRequest::kApiKey;
  header.api_version = kVersion;
  header.correlation_id = 77;
  header.client_id = "record-interop";

  Bytes frame(4);
  Writer w(frame);
  header.Encode(w, RequestHeaderVersion(FetchRequest::kApiKey, kVersion));
  request.Encode(w, kVersion);
  const uint32_t body = static_cast<uint32_t>(frame.size() - 4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<uint8_t>(body >> (24 - 8 * i));

  const int fd = Connect(bootstrap);
  EXPECT_GE(fd, 0) << bootstrap;
  if (fd < 0) return {};
  EXPECT_EQ(write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  uint8_t size_bytes[4];
  std::vector<uint8_t> response;
  if (ReadExact(fd, size_bytes, 4)) {
    const uint32_t size = (uint32_t{size_bytes[0]} << 24) | (uint32_t{size_bytes[1]} << 16) |
                          (uint32_t{size_bytes[2]} << 8) | size_bytes[3];
    EXPECT_LT(size, 64u << 20);
    response.resize(size);
    EXPECT_TRUE(ReadExact(fd, response.data(), size));
  }
  close(fd);

  Reader r(response);
  ResponseHeader rh;
  EXPECT_TRUE(rh.Decode(r, ResponseHeaderVersion(FetchRequest::kApiKey, kVersion)).ok());
  EXPECT_EQ(rh.correlation_id, 77);
  FetchResponse fetched;
  const absl::Status s = fetched.Decode(r, kVersion);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok() || fetched.responses.size() != 1 || fetched.responses[0].partitions.size() != 1) {
    ADD_FAILURE() << "unexpected fetch response shape";
    return {};
  }
  const FetchResponse::PartitionData& pd = fetched.responses[0].partitions[0];
  EXPECT_EQ(pd.error_code, protocol::ErrorCode::kNone);
  return pd.records.data.value_or(Bytes{});
}

struct DeliveryCount {
  int ok = 0;
  int failed = 0;
};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* count = static_cast<DeliveryCount*>(opaque);
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    ++count->ok;
  } else {
    ++count->failed;
  }
}

class LibrdkafkaTest : public ::testing::TestWithParam<const char*> {};

TEST_P(LibrdkafkaTest, ProducedBatchesDecodeAndValidate) {
  const std::string codec = GetParam();
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  DeliveryCount delivered;
  const std::pair<const char*, std::string> settings[] = {
      {"test.mock.num.brokers", "1"}, {"compression.codec", codec}, {"linger.ms", "200"},
      {"enable.idempotence", "true"}, {"log_level", "3"},
  };
  for (const auto& [key, value] : settings) {
    ASSERT_EQ(rd_kafka_conf_set(conf, key, value.c_str(), err, sizeof(err)), RD_KAFKA_CONF_OK)
        << key << ": " << err;
  }
  rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
  rd_kafka_conf_set_opaque(conf, &delivered);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  ASSERT_NE(rk, nullptr) << err;
  rd_kafka_mock_cluster_t* mock = rd_kafka_handle_mock_cluster(rk);
  ASSERT_NE(mock, nullptr);
  const std::string topic = "interop-" + codec;
  ASSERT_EQ(rd_kafka_mock_topic_create(mock, topic.c_str(), 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  const std::string bootstrap = rd_kafka_mock_cluster_bootstraps(mock);

  for (int i = 0; i < kMessages; ++i) {
    const std::string key = KeyOf(i);
    const std::string value = ValueOf(i);
    const bool null_key = i % 5 == 3;
    const bool null_value = i % 7 == 4;
    const std::string header_value = std::to_string(i);
    const rd_kafka_resp_err_t e = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(null_key ? nullptr : key.data(), null_key ? 0 : key.size()),
        RD_KAFKA_V_VALUE(null_value ? nullptr : const_cast<char*>(value.data()),
                         null_value ? 0 : value.size()),
        RD_KAFKA_V_HEADER("idx", header_value.data(), static_cast<ssize_t>(header_value.size())),
        RD_KAFKA_V_HEADER("nil", nullptr, -1), RD_KAFKA_V_TIMESTAMP(kBaseTimestamp + i),
        RD_KAFKA_V_END);
    ASSERT_EQ(e, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(e);
  }
  ASSERT_EQ(rd_kafka_flush(rk, 20000), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(delivered.ok, kMessages);
  EXPECT_EQ(delivered.failed, 0);

  const std::vector<uint8_t> records = FetchRaw(bootstrap, topic);
  rd_kafka_destroy(rk);
  ASSERT_FALSE(records.empty());

  auto batches = SplitBatches(records);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_FALSE(batches->empty());
  int seen = 0;
  int64_t expected_offset = 0;
  int32_t largest_batch = 0;
  const Compression expected_codec = codec == "none"     ? Compression::kNone
                                     : codec == "gzip"   ? Compression::kGzip
                                     : codec == "snappy" ? Compression::kSnappy
                                     : codec == "lz4"    ? Compression::kLz4
                                                         : Compression::kZstd;
  for (const BatchView& batch : *batches) {
    EXPECT_TRUE(batch.CrcValid());
    EXPECT_EQ(batch.compression(), expected_codec);
    EXPECT_EQ(batch.base_offset(), expected_offset);
    EXPECT_GE(batch.producer_id(), 0);  // idempotent producer
    EXPECT_EQ(batch.base_sequence(), expected_offset);
    expected_offset = batch.last_offset() + 1;
    largest_batch = std::max(largest_batch, batch.record_count());

    // As the producer sent it (base offset 0), it passes produce validation.
    std::vector<uint8_t> sent(batch.bytes().begin(), batch.bytes().end());
    SetBaseOffset(sent, 0);
    const protocol::KafkaError e = ValidateBatch(sent, ValidationOptions{});
    EXPECT_TRUE(e.ok()) << protocol::ErrorName(e.code) << ": " << e.message;

    const Status s = ForEachRecord(batch, [&](const Record& r) {
      const int i = seen++;
      EXPECT_EQ(batch.base_timestamp() + r.timestamp_delta, kBaseTimestamp + i);
      if (i % 5 == 3) {
        EXPECT_FALSE(r.key.has_value()) << i;
      } else {
        EXPECT_EQ(std::string(r.key->begin(), r.key->end()), KeyOf(i));
      }
      if (i % 7 == 4) {
        EXPECT_FALSE(r.value.has_value()) << i;
      } else {
        EXPECT_EQ(std::string(r.value->begin(), r.value->end()), ValueOf(i));
      }
      EXPECT_EQ(r.headers.size(), 2u);
      if (r.headers.size() == 2) {
        EXPECT_EQ(std::string(r.headers[0].key.begin(), r.headers[0].key.end()), "idx");
        EXPECT_EQ(std::string(r.headers[0].value->begin(), r.headers[0].value->end()),
                  std::to_string(i));
        EXPECT_FALSE(r.headers[1].value.has_value());
      }
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(seen, kMessages);
  EXPECT_GT(largest_batch, 1);  // linger.ms gathered records, so the codec saw real batches
  RecordProperty("batches", static_cast<int>(batches->size()));
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, LibrdkafkaTest,
                         ::testing::Values("none", "gzip", "snappy", "lz4", "zstd"));

}  // namespace
}  // namespace runnel::record
