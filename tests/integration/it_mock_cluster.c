/* librdkafka's in-memory mock cluster as a process, so the integration tests can be
 * developed against it (RUNNEL_TEST_TARGET=mock) while the broker's data path is built.
 *
 *   it_mock_cluster [brokers]
 *
 * Prints "bootstrap <host:port,...>" on stdout, then reads commands from stdin, one a line:
 *   topic <name> <partitions>   creates a topic (the mock has no CreateTopics API);
 *                               answers "ok" or "error <message>"
 * Exits when stdin closes or on SIGTERM/SIGINT. */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stop_requested = 0;

static void OnSignal(int sig) {
  (void)sig;
  stop_requested = 1;
}

int main(int argc, char** argv) {
  int brokers = argc > 1 ? atoi(argv[1]) : 1;
  if (brokers < 1) brokers = 1;
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  /* The handle only hosts the mock cluster's threads and never connects anywhere: its
   * notice about having no bootstrap servers is noise. */
  if (rd_kafka_conf_set(conf, "log_level", "4", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
    fprintf(stderr, "conf: %s\n", err);
    return 1;
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk == NULL) {
    fprintf(stderr, "rd_kafka_new: %s\n", err);
    return 1;
  }
  rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(rk, brokers);
  if (cluster == NULL) {
    fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal; /* no SA_RESTART: a signal interrupts the blocking read */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  printf("bootstrap %s\n", rd_kafka_mock_cluster_bootstraps(cluster));
  fflush(stdout);

  char line[1024];
  while (!stop_requested && fgets(line, sizeof(line), stdin) != NULL) {
    char name[512];
    int partitions = 0;
    if (sscanf(line, "topic %511s %d", name, &partitions) == 2) {
      rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(cluster, name, partitions, 1);
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        printf("ok\n");
      } else {
        printf("error %s\n", rd_kafka_err2str(e));
      }
    } else {
      printf("error unknown command\n");
    }
    fflush(stdout);
  }
  rd_kafka_mock_cluster_destroy(cluster);
  rd_kafka_destroy(rk);
  return 0;
}
