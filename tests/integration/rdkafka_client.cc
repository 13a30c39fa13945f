// A librdkafka client for the produce/consume integration tests, with both the C and the
// C++ API, so the tests drive each the same way. Python writes the records and checks what
// comes back; this program only moves them.
//
//   rdkafka_client <c|cpp> produce <bootstrap> <topic> [prop=value ...]
//       stdin:  one record a line: partition(-1: partitioner) timestamp(0: now) key value
//               headers, tab-separated. key and value are hex, "-" for null; headers are
//               comma-separated name=value pairs, both hex, empty for none.
//       stdout: one delivery report a line: index error-name partition offset
//   rdkafka_client <c|cpp> consume <bootstrap> <topic> <partition>:<offset>:<count>[,...]
//                  [prop=value ...]
//       Reads <count> records of each partition from <offset> (no consumer group) and
//       prints each as: partition offset timestamp-type timestamp key value headers.
//       Exits 1 when they did not all arrive within test.timeout.ms (default 60000).
//   rdkafka_client c seq-produce <bootstrap> <topic> <partitions> <count> <value-bytes>
//                  <acked-file> [prop=value ...]
//       Produces <count> records whose value starts with their 8-byte sequence number
//       (round robin over the partitions) and appends the sequence number of every record
//       whose delivery report said success to <acked-file> (uint64, little endian).
//       Prints "acked N" as it goes and "done produced=N acked=N failed=N checksum=X".
//   rdkafka_client c seq-consume <bootstrap> <topic> <partitions> <seq-file>
//                  [prop=value ...]
//       Reads every partition from its start to its high watermark, checks each value
//       against its sequence number, appends the sequence numbers to <seq-file> and prints
//       "done consumed=N corrupt=N checksum=X log_start=N" (log_start: the partitions' log
//       start offsets added up).
//   rdkafka_client c txn-produce <bootstrap> <topic> <partitions> <transactions> <per-txn>
//                  <abort-every> <committed-file> transactional.id=ID [prop=value ...]
//       Runs <transactions> transactions of <per-txn> sequence-numbered records each (as
//       seq-produce, round robin); every <abort-every>-th one (0: none) is aborted, the others
//       committed, each once its records are delivered. Appends the sequence numbers of each
//       committed transaction to <committed-file> once its commit returned. An abortable error
//       aborts the transaction (not counted as committed); a fatal one (fenced) ends the run.
//       Prints "done committed=N aborted=N failed=N records=N fatal=NAME|-".
//   rdkafka_client c seq-drain <bootstrap> <topic> <partitions> <seq-file> [prop=value ...]
//       Reads every partition from its start until the end the consumer sees (for a
//       read_committed consumer: the last stable offset), checking values as seq-consume,
//       and prints "done consumed=N corrupt=N".
//
// Properties starting with "test." are this program's own: test.timeout.ms, and
// test.progress.every (how many acknowledged records between "acked N" lines).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using Bytes = std::optional<std::string>;  // nullopt is Kafka's null

struct Record {
  int32_t partition = -1;
  int64_t timestamp = 0;
  Bytes key;
  Bytes value;
  std::vector<std::pair<std::string, std::string>> headers;
};

struct Options {
  std::string bootstrap;
  std::string topic;
  std::vector<std::pair<std::string, std::string>> props;
  int64_t timeout_ms = 60000;
  int64_t progress_every = 50000;
};

[[noreturn]] void Fail(const std::string& what) {
  fprintf(stderr, "rdkafka_client: %s\n", what.c_str());
  exit(2);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

std::string FromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) Fail("odd hex length");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

std::string ToHex(const void* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out(2 * size, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::string BytesField(const void* data, size_t size) {
  return data == nullptr ? "-" : ToHex(data, size);
}

Bytes ParseBytes(const std::string& field) {
  if (field == "-") return std::nullopt;
  return FromHex(field);
}

Record ParseRecord(const std::string& line) {
  std::vector<std::string> f = Split(line, '\t');
  if (f.size() != 5) Fail("a record line needs 5 tab-separated fields: " + line);
  Record r;
  r.partition = std::stoi(f[0]);
  r.timestamp = std::stoll(f[1]);
  r.key = ParseBytes(f[2]);
  r.value = ParseBytes(f[3]);
  if (!f[4].empty()) {
    for (const std::string& h : Split(f[4], ',')) {
      std::vector<std::string> kv = Split(h, '=');
      if (kv.size() != 2) Fail("bad header " + h);
      r.headers.emplace_back(FromHex(kv[0]), FromHex(kv[1]));
    }
  }
  return r;
}

std::vector<Record> ReadRecords() {
  std::vector<Record> records;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty()) records.push_back(ParseRecord(line));
  }
  return records;
}

struct Want {
  int32_t partition;
  int64_t offset;
  int64_t count;
};

std::vector<Want> ParseWants(const std::string& arg) {
  std::vector<Want> wants;
  for (const std::string& w : Split(arg, ',')) {
    std::vector<std::string> f = Split(w, ':');
    if (f.size() != 3) Fail("want partition:offset:count, got " + w);
    wants.push_back({std::stoi(f[0]), std::stoll(f[1]), std::stoll(f[2])});
  }
  return wants;
}

void PrintRecord(int32_t partition, int64_t offset, int ts_type, int64_t ts, const void* key,
                 size_t key_len, const void* value, size_t value_len,
                 const std::vector<std::string>& headers) {
  std::string h;
  for (size_t i = 0; i < headers.size(); ++i) h += (i ? "," : "") + headers[i];
  printf("%d\t%" PRId64 "\t%d\t%" PRId64 "\t%s\t%s\t%s\n", partition, offset, ts_type, ts,
         BytesField(key, key_len).c_str(), BytesField(value, value_len).c_str(), h.c_str());
}

// ---- C API ----------------------------------------------------------------------------

rd_kafka_conf_t* CConf(const Options& o) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const std::string& k, const std::string& v) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      Fail(k + "=" + v + ": " + err);
    }
  };
  set("bootstrap.servers", o.bootstrap);
  for (const auto& [k, v] : o.props) set(k, v);
  return conf;
}

void CDeliveryReport(rd_kafka_t*, const rd_kafka_message_t* m, void*) {
  printf("%" PRIdPTR "\t%s\t%d\t%" PRId64 "\n", reinterpret_cast<intptr_t>(m->_private),
         rd_kafka_err2name(m->err), m->partition, m->offset);
}

int CProduce(const Options& o) {
  std::vector<Record> records = ReadRecords();
  rd_kafka_conf_t* conf = CConf(o);
  rd_kafka_conf_set_dr_msg_cb(conf, CDeliveryReport);
  char err[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk == nullptr) Fail(err);
  static const char kEmpty[1] = {0};
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    while (true) {
      rd_kafka_headers_t* hdrs = rd_kafka_headers_new(r.headers.size());
      for (const auto& [name, value] : r.headers) {
        rd_kafka_header_add(hdrs, name.data(), name.size(), value.data(), value.size());
      }
      // A non-null pointer with length 0 is an empty value, a null pointer a null one.
      const void* key = r.key ? (r.key->empty() ? kEmpty : r.key->data()) : nullptr;
      const size_t key_len = r.key ? r.key->size() : 0;
      void* value =
          r.value ? const_cast<char*>(r.value->empty() ? kEmpty : r.value->data()) : nullptr;
      const size_t value_len = r.value ? r.value->size() : 0;
      rd_kafka_resp_err_t e = rd_kafka_producev(
          rk, RD_KAFKA_V_TOPIC(o.topic.c_str()), RD_KAFKA_V_PARTITION(r.partition),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, key_len),
          RD_KAFKA_V_VALUE(value, value_len), RD_KAFKA_V_TIMESTAMP(r.timestamp),
          RD_KAFKA_V_HEADERS(hdrs),
          RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<intptr_t>(i))), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      rd_kafka_headers_destroy(hdrs);
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk, 100);
        continue;
      }
      printf("%zu\t%s\t-1\t-1\n", i, rd_kafka_err2name(e));  // refused before sending
      break;
    }
    rd_kafka_poll(rk, 0);
  }
  rd_kafka_resp_err_t e = rd_kafka_flush(rk, static_cast<int>(o.timeout_ms));
  rd_kafka_destroy(rk);
  fflush(stdout);
  return e == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : 1;
}

std::vector<std::string> CHeaders(const rd_kafka_message_t* m) {
  std::vector<std::string> out;
  rd_kafka_headers_t* hdrs = nullptr;
  if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR) return out;
  const char* name;
  const void* value;
  size_t size;
  for (size_t i = 0;
       rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; ++i) {
    out.push_back(ToHex(name, strlen(name)) + "=" + BytesField(value, size));
  }
  return out;
}

// Consumes with the legacy (simple) consumer API: no group, no coordinator.
template <typename OnMessage>
bool CConsumeLoop(const Options& o, const std::vector<Want>& wants, OnMessage on_message) {
  char err[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, CConf(o), err, sizeof(err));
  if (rk == nullptr) Fail(err);
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, o.topic.c_str(), nullptr);
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  std::map<int32_t, int64_t> left;
  int64_t total_left = 0;
  for (const Want& w : wants) {
    if (w.count == 0) continue;
    left[w.partition] = w.count;
    total_left += w.count;
    if (rd_kafka_consume_start_queue(rkt, w.partition, w.offset, queue) != 0) {
      Fail(std::string("consume_start: ") + rd_kafka_err2str(rd_kafka_last_error()));
    }
  }
  const int64_t deadline = NowMs() + o.timeout_ms;
  while (total_left > 0 && NowMs() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consume_queue(queue, 200);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      auto it = left.find(m->partition);
      if (it != left.end() && it->second > 0) {
        on_message(m);
        --it->second;
        --total_left;
      }
    } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      fprintf(stderr, "consume error on partition %d: %s\n", m->partition,
              rd_kafka_message_errstr(m));
    }
    rd_kafka_message_destroy(m);
  }
  for (const auto& [p, n] : left) {
    rd_kafka_consume_stop(rkt, p);
    if (n > 0) fprintf(stderr, "partition %d: %" PRId64 " records missing\n", p, n);
  }
  rd_kafka_queue_destroy(queue);
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);
  return total_left == 0;
}

int CConsume(const Options& o, const std::vector<Want>& wants) {
  bool ok = CConsumeLoop(o, wants, [](const rd_kafka_message_t* m) {
    rd_kafka_timestamp_type_t ts_type;
    int64_t ts = rd_kafka_message_timestamp(m, &ts_type);
    PrintRecord(m->partition, m->offset, ts_type, ts, m->key, m->key_len, m->payload, m->len,
                CHeaders(m));
  });
  fflush(stdout);
  return ok ? 0 : 1;
}

// ---- sequence-numbered runs (durability) ----------------------------------------------

// The value of sequence number `seq`: the number big-endian, then bytes derived from it,
// so a consumer can tell a damaged or misplaced value.
void FillValue(uint64_t seq, std::string& value) {
  for (int i = 0; i < 8; ++i) value[i] = static_cast<char>(seq >> (56 - 8 * i));
  uint32_t x = static_cast<uint32_t>(seq * 2654435761u) | 1u;
  for (size_t i = 8; i < value.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    value[i] = static_cast<char>(x);
  }
}

uint64_t Fnv1a(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The sequence number a consumed value starts with (UINT64_MAX when it is too short), counting
// it in `*corrupt` when the value is not FillValue's for that number. `expected` is scratch.
uint64_t CheckSeqValue(const rd_kafka_message_t* m, std::string& expected, uint64_t* corrupt) {
  if (m->payload == nullptr || m->len < 8) {
    ++*corrupt;
    return UINT64_MAX;
  }
  const auto* p = static_cast<const unsigned char*>(m->payload);
  uint64_t seq = 0;
  for (int i = 0; i < 8; ++i) seq = (seq << 8) | p[i];
  expected.assign(m->len, '\0');
  FillValue(seq, expected);
  if (memcmp(expected.data(), m->payload, m->len) != 0) ++*corrupt;
  return seq;
}

struct SeqState {
  FILE* acked_file = nullptr;
  uint64_t acked = 0;
  uint64_t failed = 0;
  uint64_t checksum = 0;  // sum of the values' FNV-1a hashes: independent of order
  uint64_t progress_every = 50000;
  std::map<std::string, uint64_t> errors;
};

void SeqDeliveryReport(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* s = static_cast<SeqState*>(opaque);
  if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    ++s->failed;
    ++s->errors[rd_kafka_err2name(m->err)];
    return;
  }
  uint64_t seq = reinterpret_cast<uintptr_t>(m->_private);
  fwrite(&seq, sizeof(seq), 1, s->acked_file);
  s->checksum += Fnv1a(m->payload, m->len);
  if (++s->acked % s->progress_every == 0) {
    printf("acked %" PRIu64 "\n", s->acked);
    fflush(stdout);
  }
}

int SeqProduce(const Options& o, int partitions, uint64_t count, size_t value_bytes,
               const char* acked_path) {
  SeqState s;
  s.progress_every = std::max<int64_t>(o.progress_every, 1);
  s.acked_file = fopen(acked_path, "wb");
  if (s.acked_file == nullptr) Fail(std::string("cannot open ") + acked_path);
  rd_kafka_conf_t* conf = CConf(o);
  rd_kafka_conf_set_dr_msg_cb(conf, SeqDeliveryReport);
  rd_kafka_conf_set_opaque(conf, &s);
  char err[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk == nullptr) Fail(err);
  std::string value(std::max<size_t>(value_bytes, 8), '\0');
  uint64_t refused = 0;
  for (uint64_t seq = 0; seq < count; ++seq) {
    FillValue(seq, value);
    while (true) {
      rd_kafka_resp_err_t e = rd_kafka_producev(
          rk, RD_KAFKA_V_TOPIC(o.topic.c_str()),
          RD_KAFKA_V_PARTITION(static_cast<int32_t>(seq % partitions)),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(value.data(), value.size()),
          RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<uintptr_t>(seq))), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk, 50);
        continue;
      }
      ++refused;
      break;
    }
    if (seq % 1000 == 0) rd_kafka_poll(rk, 0);
  }
  rd_kafka_resp_err_t e = rd_kafka_flush(rk, static_cast<int>(o.timeout_ms));
  rd_kafka_destroy(rk);
  fclose(s.acked_file);
  std::string errors;
  for (const auto& [name, n] : s.errors) errors += " " + name + "=" + std::to_string(n);
  printf("done produced=%" PRIu64 " acked=%" PRIu64 " failed=%" PRIu64 " refused=%" PRIu64
         " checksum=%" PRIu64 " flush=%s errors:%s\n",
         count, s.acked, s.failed, refused, s.checksum, rd_kafka_err2name(e), errors.c_str());
  fflush(stdout);
  return e == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : 1;
}

int SeqConsume(const Options& o, int partitions, const char* seq_path) {
  char err[512];
  std::vector<Want> wants;
  int64_t log_start_sum = 0;  // records no longer in the log: none, unless retention ran
  {
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, CConf(o), err, sizeof(err));
    if (rk == nullptr) Fail(err);
    for (int p = 0; p < partitions; ++p) {
      int64_t low = 0, high = 0;
      // A broker that just had a role restarted may answer NOT_LEADER_OR_FOLLOWER (retriable)
      // for a moment; an application retries, and so does this client, within its timeout.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeout_ms);
      rd_kafka_resp_err_t e;
      while (true) {
        e = rd_kafka_query_watermark_offsets(rk, o.topic.c_str(), p, &low, &high,
                                             static_cast<int>(o.timeout_ms));
        const bool retriable = e == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
                               e == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE;
        if (!retriable || std::chrono::steady_clock::now() >= deadline) break;
        rd_kafka_poll(rk, 100);
      }
      if (e != RD_KAFKA_RESP_ERR_NO_ERROR) Fail(std::string("watermarks: ") + rd_kafka_err2str(e));
      wants.push_back({p, low, high - low});
      log_start_sum += low;
    }
    rd_kafka_destroy(rk);
  }
  FILE* out = fopen(seq_path, "wb");
  if (out == nullptr) Fail(std::string("cannot open ") + seq_path);
  uint64_t consumed = 0, corrupt = 0, checksum = 0;
  std::string expected;
  bool ok = CConsumeLoop(o, wants, [&](const rd_kafka_message_t* m) {
    ++consumed;
    const uint64_t seq = CheckSeqValue(m, expected, &corrupt);
    fwrite(&seq, sizeof(seq), 1, out);
    checksum += Fnv1a(m->payload, m->len);
  });
  fclose(out);
  printf("done consumed=%" PRIu64 " corrupt=%" PRIu64 " checksum=%" PRIu64 " log_start=%" PRId64
         " complete=%d\n",
         consumed, corrupt, checksum, log_start_sum, ok ? 1 : 0);
  fflush(stdout);
  return ok ? 0 : 1;
}

// ---- transactions ------------------------------------------------------------------------

rd_kafka_t* TxnProducer(const Options& o) {
  char err[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, CConf(o), err, sizeof(err));
  if (rk == nullptr) Fail(err);
  rd_kafka_error_t* e = rd_kafka_init_transactions(rk, static_cast<int>(o.timeout_ms));
  if (e != nullptr) Fail(std::string("init_transactions: ") + rd_kafka_error_string(e));
  return rk;
}

// The name of `e`'s code and whether it is fatal; destroys `e`.
std::string TakeError(rd_kafka_error_t* e, bool* fatal) {
  std::string name = rd_kafka_err2name(rd_kafka_error_code(e));
  *fatal = rd_kafka_error_is_fatal(e) != 0;
  rd_kafka_error_destroy(e);
  return name;
}

int TxnProduce(const Options& o, int partitions, uint64_t transactions, uint64_t per_txn,
               uint64_t abort_every, const char* committed_path) {
  FILE* committed_file = fopen(committed_path, "wb");
  if (committed_file == nullptr) Fail(std::string("cannot open ") + committed_path);
  rd_kafka_t* rk = TxnProducer(o);
  const int timeout = static_cast<int>(o.timeout_ms);
  uint64_t committed = 0, aborted = 0, failed = 0, seq = 0;
  std::string fatal_name = "-";
  std::string value(16, '\0');
  for (uint64_t t = 0; t < transactions && fatal_name == "-"; ++t) {
    if (rd_kafka_error_t* e = rd_kafka_begin_transaction(rk)) {
      bool fatal = false;
      fatal_name = TakeError(e, &fatal);
      break;
    }
    std::vector<uint64_t> seqs;
    for (uint64_t i = 0; i < per_txn; ++i, ++seq) {
      FillValue(seq, value);
      rd_kafka_resp_err_t e =
          rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(o.topic.c_str()),
                            RD_KAFKA_V_PARTITION(static_cast<int32_t>(seq % partitions)),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                            RD_KAFKA_V_VALUE(value.data(), value.size()), RD_KAFKA_V_END);
      if (e != RD_KAFKA_RESP_ERR_NO_ERROR) Fail(std::string("produce: ") + rd_kafka_err2name(e));
      seqs.push_back(seq);
      rd_kafka_poll(rk, 0);
    }
    // Every record delivered first, so its partition is in the transaction when it ends. An
    // abort sent while a partition's registration is still refused (the previous
    // transaction's markers being written: CONCURRENT_TRANSACTIONS) would meet the previous
    // commit's state and be INVALID_TXN_STATE, on Kafka as here.
    rd_kafka_flush(rk, timeout);
    const bool abort = abort_every > 0 && t % abort_every == abort_every - 1;
    rd_kafka_error_t* e =
        abort ? rd_kafka_abort_transaction(rk, timeout) : rd_kafka_commit_transaction(rk, timeout);
    if (e == nullptr) {
      if (abort) {
        ++aborted;
      } else {
        ++committed;
        fwrite(seqs.data(), sizeof(uint64_t), seqs.size(), committed_file);
        fflush(committed_file);
      }
      continue;
    }
    const bool abortable = rd_kafka_error_txn_requires_abort(e) != 0;
    bool fatal = false;
    std::string name = TakeError(e, &fatal);
    ++failed;
    fprintf(stderr, "transaction %" PRIu64 ": %s%s\n", t, name.c_str(),
            fatal ? " (fatal)" : (abortable ? " (abortable)" : ""));
    if (fatal) {
      fatal_name = name;
    } else if (abortable) {
      if (rd_kafka_error_t* a = rd_kafka_abort_transaction(rk, timeout)) {
        fatal_name = TakeError(a, &fatal);
      }
    }
  }
  fclose(committed_file);
  rd_kafka_destroy(rk);
  printf("done committed=%" PRIu64 " aborted=%" PRIu64 " failed=%" PRIu64 " records=%" PRIu64
         " fatal=%s\n",
         committed, aborted, failed, seq, fatal_name.c_str());
  fflush(stdout);
  return fatal_name == "-" ? 0 : 1;
}

int SeqDrain(const Options& o, int partitions, const char* seq_path) {
  Options co = o;
  co.props.emplace_back("enable.partition.eof", "true");
  co.props.emplace_back("auto.offset.reset", "earliest");
  // assign() needs a group handle; nothing is committed to it.
  co.props.emplace_back("group.id", "rdkafka-client-seq-drain");
  co.props.emplace_back("enable.auto.commit", "false");
  char err[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, CConf(co), err, sizeof(err));
  if (rk == nullptr) Fail(err);
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(parts, o.topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  }
  if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) Fail("assign");
  rd_kafka_topic_partition_list_destroy(parts);
  FILE* out = fopen(seq_path, "wb");
  if (out == nullptr) Fail(std::string("cannot open ") + seq_path);
  uint64_t consumed = 0, corrupt = 0;
  int at_end = 0;
  std::string expected;
  const int64_t deadline = NowMs() + o.timeout_ms;
  while (at_end < partitions && NowMs() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      ++at_end;
    } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      fprintf(stderr, "consume: %s\n", rd_kafka_message_errstr(m));
    } else {
      ++consumed;
      const uint64_t seq = CheckSeqValue(m, expected, &corrupt);
      fwrite(&seq, sizeof(seq), 1, out);
    }
    rd_kafka_message_destroy(m);
  }
  fclose(out);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  printf("done consumed=%" PRIu64 " corrupt=%" PRIu64 " complete=%d\n", consumed, corrupt,
         at_end >= partitions ? 1 : 0);
  fflush(stdout);
  return at_end >= partitions ? 0 : 1;
}

// ---- C++ API --------------------------------------------------------------------------

std::unique_ptr<RdKafka::Conf> CppConf(const Options& o) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string err;
  auto set = [&](const std::string& k, const std::string& v) {
    if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) Fail(k + "=" + v + ": " + err);
  };
  set("bootstrap.servers", o.bootstrap);
  for (const auto& [k, v] : o.props) set(k, v);
  return conf;
}

class CppDeliveryReport : public RdKafka::DeliveryReportCb {
 public:
  void dr_cb(RdKafka::Message& m) override {
    printf("%" PRIdPTR "\t%s\t%d\t%" PRId64 "\n", reinterpret_cast<intptr_t>(m.msg_opaque()),
           rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(m.err())), m.partition(), m.offset());
  }
};

int CppProduce(const Options& o) {
  std::vector<Record> records = ReadRecords();
  std::unique_ptr<RdKafka::Conf> conf = CppConf(o);
  CppDeliveryReport dr;
  std::string err;
  if (conf->set("dr_cb", &dr, err) != RdKafka::Conf::CONF_OK) Fail(err);
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), err));
  if (!producer) Fail(err);
  static char no_bytes[1] = {0};  // not const: produce() takes a void*
  for (size_t i = 0; i < records.size(); ++i) {
    Record& r = records[i];
    while (true) {
      RdKafka::Headers* headers = RdKafka::Headers::create();
      for (const auto& [name, value] : r.headers) headers->add(name, value.data(), value.size());
      RdKafka::ErrorCode e = producer->produce(
          o.topic, r.partition, RdKafka::Producer::RK_MSG_COPY,
          r.value ? (r.value->empty() ? no_bytes : r.value->data()) : nullptr,
          r.value ? r.value->size() : 0,
          r.key ? (r.key->empty() ? no_bytes : r.key->data()) : nullptr, r.key ? r.key->size() : 0,
          r.timestamp, headers, reinterpret_cast<void*>(static_cast<intptr_t>(i)));
      if (e == RdKafka::ERR_NO_ERROR) break;
      delete headers;  // produce() took it only on success
      if (e == RdKafka::ERR__QUEUE_FULL) {
        producer->poll(100);
        continue;
      }
      printf("%zu\t%s\t-1\t-1\n", i, rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(e)));
      break;
    }
    producer->poll(0);
  }
  RdKafka::ErrorCode e = producer->flush(static_cast<int>(o.timeout_ms));
  fflush(stdout);
  return e == RdKafka::ERR_NO_ERROR ? 0 : 1;
}

int CppConsume(const Options& o, const std::vector<Want>& wants) {
  std::unique_ptr<RdKafka::Conf> conf = CppConf(o);
  std::string err;
  std::unique_ptr<RdKafka::Consumer> consumer(RdKafka::Consumer::create(conf.get(), err));
  if (!consumer) Fail(err);
  std::unique_ptr<RdKafka::Topic> topic(
      RdKafka::Topic::create(consumer.get(), o.topic, nullptr, err));
  if (!topic) Fail(err);
  std::unique_ptr<RdKafka::Queue> queue(RdKafka::Queue::create(consumer.get()));
  std::map<int32_t, int64_t> left;
  int64_t total_left = 0;
  for (const Want& w : wants) {
    if (w.count == 0) continue;
    left[w.partition] = w.count;
    total_left += w.count;
    RdKafka::ErrorCode e = consumer->start(topic.get(), w.partition, w.offset, queue.get());
    if (e != RdKafka::ERR_NO_ERROR) Fail("start: " + RdKafka::err2str(e));
  }
  const int64_t deadline = NowMs() + o.timeout_ms;
  while (total_left > 0 && NowMs() < deadline) {
    std::unique_ptr<RdKafka::Message> m(consumer->consume(queue.get(), 200));
    if (m->err() == RdKafka::ERR__TIMED_OUT || m->err() == RdKafka::ERR__PARTITION_EOF) continue;
    if (m->err() != RdKafka::ERR_NO_ERROR) {
      fprintf(stderr, "consume error on partition %d: %s\n", m->partition(), m->errstr().c_str());
      continue;
    }
    auto it = left.find(m->partition());
    if (it == left.end() || it->second == 0) continue;
    --it->second;
    --total_left;
    std::vector<std::string> headers;
    if (RdKafka::Headers* h = m->headers()) {
      for (const RdKafka::Headers::Header& hdr : h->get_all()) {
        headers.push_back(ToHex(hdr.key().data(), hdr.key().size()) + "=" +
                          BytesField(hdr.value(), hdr.value_size()));
      }
    }
    RdKafka::MessageTimestamp ts = m->timestamp();
    PrintRecord(m->partition(), m->offset(), static_cast<int>(ts.type), ts.timestamp,
                m->key_pointer(), m->key_len(), m->payload(), m->len(), headers);
  }
  for (const auto& [p, n] : left) {
    consumer->stop(topic.get(), p);
    if (n > 0) fprintf(stderr, "partition %d: %" PRId64 " records missing\n", p, n);
  }
  fflush(stdout);
  return total_left == 0 ? 0 : 1;
}

// Splits "prop=value" arguments off the end; "test." ones are this program's own.
Options ParseOptions(const std::string& bootstrap, const std::string& topic, int argc, char** argv,
                     int first_prop) {
  Options o{bootstrap, topic, {}, 60000, 50000};
  for (int i = first_prop; i < argc; ++i) {
    std::string a = argv[i];
    size_t eq = a.find('=');
    if (eq == std::string::npos) Fail("expected prop=value, got " + a);
    std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    if (k == "test.timeout.ms") {
      o.timeout_ms = std::stoll(v);
    } else if (k == "test.progress.every") {
      o.progress_every = std::stoll(v);
    } else {
      o.props.emplace_back(k, v);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: see the top of rdkafka_client.cc\n");
    return 2;
  }
  const std::string api = argv[1], mode = argv[2];
  if (api != "c" && api != "cpp") Fail("api is c or cpp");
  const bool c = api == "c";
  if (mode == "produce") {
    Options o = ParseOptions(argv[3], argv[4], argc, argv, 5);
    return c ? CProduce(o) : CppProduce(o);
  }
  if (mode == "consume" && argc >= 6) {
    Options o = ParseOptions(argv[3], argv[4], argc, argv, 6);
    std::vector<Want> wants = ParseWants(argv[5]);
    return c ? CConsume(o, wants) : CppConsume(o, wants);
  }
  if (mode == "seq-produce" && c && argc >= 9) {
    Options o = ParseOptions(argv[3], argv[4], argc, argv, 9);
    return SeqProduce(o, atoi(argv[5]), strtoull(argv[6], nullptr, 10),
                      strtoull(argv[7], nullptr, 10), argv[8]);
  }
  if (mode == "seq-consume" && c && argc >= 7) {
    Options o = ParseOptions(argv[3], argv[4], argc, argv, 7);
    return SeqConsume(o, atoi(argv[5]), argv[6]);
  }
  if (mode == "txn-produce" && c && argc >= 10) {
    Options o = ParseOptions(argv[3], argv[4], argc, argv, 10);
    return TxnProduce(o, atoi(argv[5]), strtoull(argv[6], nullptr, 10),
                      strtoull(argv[7], nullptr, 10), strtoull(argv[8], nullptr, 10), argv[9]);
  }
  if (mode == "seq-drain" && c && argc >= 7) {
    Options o = ParseOptions(argv[3], argv[4], argc, argv, 7);
    return SeqDrain(o, atoi(argv[5]), argv[6]);
  }
  Fail("unknown mode " + mode);
}
