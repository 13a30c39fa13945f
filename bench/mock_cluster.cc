// librdkafka's in-memory mock cluster as a process of its own, the reference that
// bench/kafka-vs-mock compares a Runnel node with.
//
//   mock_cluster [--brokers N] [TOPIC:PARTITIONS ...]
//
// Starts a mock cluster (rdkafka_mock.h) with N brokers (1 by default), creates the topics
// named on the command line, prints its bootstrap servers as the first line of stdout and
// then serves until SIGTERM, SIGINT or EOF on stdin. Running it as its own process lets a
// driver read its CPU time from /proc/<pid>/stat exactly as it reads a Runnel daemon's.
//
// While it runs it reads commands from stdin, one a line, and answers each with one line:
//   create TOPIC PARTITIONS   ->  "ok" or "error <reason>"
// so a driver can make a fresh topic per run without restarting the cluster. The mock keeps
// at most 5 MiB (and 100,000 batches) per partition in memory, dropping the oldest batches
// beyond that, so its memory stays bounded however much is produced.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

volatile std::sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

// Parses "name:partitions"; returns false when it is not that.
bool ParseTopicSpec(const std::string& spec, std::string* name, int* partitions) {
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  char* end = nullptr;
  long p = std::strtol(spec.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p <= 0 || p > 100000) return false;
  *name = spec.substr(0, colon);
  *partitions = static_cast<int>(p);
  return true;
}

std::string CreateTopic(rd_kafka_mock_cluster_t* mcluster, const std::string& name,
                        int partitions) {
  rd_kafka_resp_err_t err =
      rd_kafka_mock_topic_create(mcluster, name.c_str(), partitions, /*replication_factor=*/1);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return std::string("error ") + rd_kafka_err2str(err);
  return "ok";
}

// Handles one command line from stdin and returns the answer line.
std::string HandleCommand(rd_kafka_mock_cluster_t* mcluster, const std::string& line) {
  char verb[16] = {0};
  char topic[256] = {0};
  int partitions = 0;
  if (std::sscanf(line.c_str(), "%15s %255s %d", verb, topic, &partitions) == 3 &&
      std::strcmp(verb, "create") == 0 && partitions > 0) {
    return CreateTopic(mcluster, topic, partitions);
  }
  return "error usage: create TOPIC PARTITIONS";
}

}  // namespace

int main(int argc, char** argv) {
  int brokers = 1;
  int first_topic = 1;
  if (argc >= 3 && std::strcmp(argv[1], "--brokers") == 0) {
    brokers = std::atoi(argv[2]);
    first_topic = 3;
  }
  if (brokers <= 0) {
    std::fprintf(stderr, "usage: mock_cluster [--brokers N] [TOPIC:PARTITIONS ...]\n");
    return 2;
  }

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // The mock cluster borrows a client handle for its logging and threads; this producer
  // never connects anywhere (no bootstrap.servers, test.mock.num.brokers unset).
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    std::fprintf(stderr, "mock_cluster: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t* mcluster = rd_kafka_mock_cluster_new(rk, brokers);
  if (mcluster == nullptr) {
    std::fprintf(stderr, "mock_cluster: rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return 1;
  }

  int rc = 0;
  for (int i = first_topic; i < argc; ++i) {
    std::string name;
    int partitions = 0;
    if (!ParseTopicSpec(argv[i], &name, &partitions)) {
      std::fprintf(stderr, "mock_cluster: bad topic spec '%s' (want NAME:PARTITIONS)\n", argv[i]);
      rc = 2;
      break;
    }
    std::string answer = CreateTopic(mcluster, name, partitions);
    if (answer != "ok") {
      std::fprintf(stderr, "mock_cluster: create %s: %s\n", argv[i], answer.c_str());
      rc = 1;
      break;
    }
  }

  if (rc == 0) {
    std::printf("%s\n", rd_kafka_mock_cluster_bootstraps(mcluster));
    std::fflush(stdout);

    // Serve until a signal or stdin's EOF. poll() with a timeout so a signal that lands
    // between the flag check and the wait is seen within 200 ms at worst.
    std::string pending;
    bool stdin_open = true;
    while (!g_stop && stdin_open) {
      pollfd pfd{STDIN_FILENO, POLLIN, 0};
      int n = poll(&pfd, 1, 200);
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (n == 0) continue;
      char buf[4096];
      ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        stdin_open = false;
        break;
      }
      pending.append(buf, static_cast<size_t>(got));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (line.empty()) continue;
        std::printf("%s\n", HandleCommand(mcluster, line).c_str());
        std::fflush(stdout);
      }
    }
  }

  rd_kafka_mock_cluster_destroy(mcluster);
  rd_kafka_destroy(rk);
  return rc;
}
