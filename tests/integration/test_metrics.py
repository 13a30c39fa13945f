"""The node's HTTP port (runnel.http.listener): /metrics of every role, /healthz, /readyz;
and a role run alone serving its own."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from harness import BIN_DIR, Node, free_port, wait_until

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def http_get(port, path, timeout=10):
    """(status, body) of GET http://127.0.0.1:<port><path>."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def parse_metrics(text):
    """{(name, frozenset of (label, value)): value} of every sample line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m is None:
            raise AssertionError(f"not a sample line: {line!r}")
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def value(samples, name, **labels):
    """The value of the one series `name` with exactly `labels`, or None."""
    return samples.get((name, frozenset(labels.items())))


def promtool_check(text):
    out = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    return out.returncode, out.stdout + out.stderr


class NodeMetricsTest(unittest.TestCase):
    def setUp(self):
        self.http_port = free_port()
        self.node = Node(extra_config={
            "runnel.http.listener": f"http://127.0.0.1:{self.http_port}"})

    def tearDown(self):
        self.node.cleanup()

    def scrape(self):
        status, body = http_get(self.http_port, "/metrics")
        self.assertEqual(status, 200, body)
        return body

    def test_metrics_of_every_role_move_with_produce_and_fetch(self):
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic
        self.node.start()
        self.assertEqual(http_get(self.http_port, "/healthz"), (200, "ok\n"))
        wait_until(lambda: http_get(self.http_port, "/readyz")[0] == 200, 10, "/readyz 200")

        topic = "metrics-topic"
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        for f in admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=20).values():
            f.result(timeout=30)
        before = parse_metrics(self.scrape())
        produce_before = value(before, "runnel_broker_requests_total", role="brokerd",
                               api="Produce") or 0

        count, size = 200, 100
        producer = Producer({"bootstrap.servers": self.node.bootstrap, "linger.ms": 5})
        for i in range(count):
            producer.produce(topic, key=str(i).encode(), value=b"v" * size)
        self.assertEqual(producer.flush(30), 0)

        consumer = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": "metrics-g",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < count and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got += 1
        self.assertEqual(got, count)
        consumer.commit(asynchronous=False)
        consumer.close()

        text = self.scrape()
        code, out = promtool_check(text)
        self.assertEqual(code, 0, out)
        m = parse_metrics(text)

        # brokerd: per topic and per API.
        self.assertEqual(value(m, "runnel_broker_topic_records_in_total", role="brokerd",
                               topic=topic), count)
        bytes_in = value(m, "runnel_broker_topic_bytes_in_total", role="brokerd", topic=topic)
        self.assertGreater(bytes_in, count * size)
        # Every batch produced was fetched at least once.
        self.assertGreaterEqual(
            value(m, "runnel_broker_topic_bytes_out_total", role="brokerd", topic=topic), bytes_in)
        produced = value(m, "runnel_broker_requests_total", role="brokerd", api="Produce")
        self.assertGreater(produced, produce_before)
        self.assertEqual(value(m, "runnel_broker_request_latency_seconds_count", role="brokerd",
                               api="Produce"), produced)
        self.assertEqual(value(m, "runnel_broker_request_latency_seconds_bucket", role="brokerd",
                               api="Produce", le="+Inf"), produced)
        self.assertGreater(value(m, "runnel_broker_requests_total", role="brokerd", api="Fetch"),
                           0)
        # librdkafka's first JoinGroup is answered MEMBER_ID_REQUIRED (KIP-394).
        self.assertGreaterEqual(value(m, "runnel_broker_request_errors_total", role="brokerd",
                                      api="JoinGroup", error="MEMBER_ID_REQUIRED") or 0, 1)
        self.assertGreaterEqual(value(m, "runnel_broker_connections_accepted_total",
                                      role="brokerd"), 3)

        # storaged: the topic's logs, appends and flushes.
        self.assertEqual(value(m, "runnel_storage_partitions", role="storaged", topic=topic), 2)
        self.assertGreater(value(m, "runnel_storage_log_size_bytes", role="storaged",
                                 topic=topic), count * size)
        self.assertEqual(value(m, "runnel_storage_log_segments", role="storaged", topic=topic), 2)
        self.assertGreaterEqual(value(m, "runnel_storage_appended_records_total",
                                      role="storaged"), count)
        self.assertIsNotNone(value(m, "runnel_storage_flush_seconds_count", role="storaged"))

        # controllerd: the single voter leads.
        self.assertGreaterEqual(value(m, "runnel_controller_raft_term", role="controllerd"), 1)
        self.assertEqual(value(m, "runnel_controller_raft_leader_id", role="controllerd"), 1)
        self.assertEqual(value(m, "runnel_controller_raft_is_leader", role="controllerd"), 1)
        self.assertGreater(value(m, "runnel_controller_raft_commit_offset", role="controllerd"),
                           0)
        self.assertEqual(value(m, "runnel_controller_brokers", role="controllerd",
                               state="unfenced"), 1)

        # Every process, and the supervisor's view of the roles.
        for role in ("supervisor", "controllerd", "storaged", "brokerd"):
            self.assertGreater(value(m, "process_resident_memory_bytes", role=role), 0, role)
            self.assertGreater(value(m, "process_open_fds", role=role), 0, role)
            self.assertGreater(value(m, "process_start_time_seconds", role=role),
                               time.time() - 3600, role)
        for role in ("controllerd", "storaged", "brokerd"):
            self.assertEqual(value(m, "runnel_supervisor_role_up", role=role), 1, role)
            self.assertEqual(value(m, "runnel_supervisor_role_restarts_total", role=role), 0)

        # Consumer lag: none after the commit, then what was produced while the group was away.
        def group_series(samples, name):
            return {dict(labels)["partition"]: v for (n, labels), v in samples.items()
                    if n == name and dict(labels).get("group") == "metrics-g"
                    and dict(labels).get("topic") == topic}
        self.assertEqual(sum(group_series(m, "runnel_broker_consumer_group_committed_offset")
                             .values()), count)
        self.assertEqual(group_series(m, "runnel_broker_consumer_group_lag"), {"0": 0, "1": 0})
        more = 50
        for i in range(more):
            producer.produce(topic, key=str(i).encode(), value=b"w" * size)
        self.assertEqual(producer.flush(30), 0)
        lag = group_series(parse_metrics(self.scrape()), "runnel_broker_consumer_group_lag")
        self.assertEqual(sum(lag.values()), more, lag)

        # A deleted topic's series go with it.
        for f in admin.delete_topics([topic], request_timeout=20).values():
            f.result(timeout=30)
        wait_until(lambda: value(parse_metrics(self.scrape()), "runnel_broker_topic_bytes_in_total",
                                 role="brokerd", topic=topic) is None, 15,
                   "the deleted topic's series removed")

    def test_readyz_is_503_while_a_role_does_not_answer(self):
        self.node.start()
        wait_until(lambda: http_get(self.http_port, "/readyz")[0] == 200, 10, "/readyz 200")
        pid = self.node.kill_role("storaged", signal.SIGSTOP)
        try:
            status, body = http_get(self.http_port, "/readyz")
            self.assertEqual(status, 503, body)
            self.assertIn("storaged", body)
            self.assertNotIn("brokerd", body)
            self.assertEqual(http_get(self.http_port, "/healthz")[0], 200)
            # The scrape still answers, without the stopped role's series.
            text = self.scrape()
            self.assertIn('role="brokerd"', text)
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: http_get(self.http_port, "/readyz")[0] == 200, 10,
                   "/readyz 200 after SIGCONT")

        old = self.node.kill_role("brokerd", signal.SIGKILL)
        self.node.wait_role_restarted("brokerd", old)
        wait_until(lambda: http_get(self.http_port, "/readyz")[0] == 200, 10,
                   "/readyz 200 after the restart")
        m = parse_metrics(self.scrape())
        self.assertEqual(value(m, "runnel_supervisor_role_restarts_total", role="brokerd"), 1)
        self.assertEqual(value(m, "runnel_supervisor_role_restarts_total", role="storaged"), 0)

    def test_bad_listener_stops_startup_naming_the_key(self):
        self.node.write_config({"node.id": "1", "runnel.http.listener": "127.0.0.1:9644"})
        out = self.node.runnel("--config", self.node.config_path)
        self.assertEqual(out.returncode, 2)
        self.assertIn("config error: runnel.http.listener=127.0.0.1:9644", out.stderr)

    def test_port_in_use_stops_startup_naming_the_key(self):
        import socket
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", self.http_port))
            s.listen(1)
            out = self.node.runnel("--config", self.node.config_path)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn(f"runnel.http.listener=http://127.0.0.1:{self.http_port}", out.stderr)


class RoleAloneTest(unittest.TestCase):
    def test_storaged_alone_serves_its_own_port(self):
        work = tempfile.mkdtemp(prefix="rnl-alone-", dir="/tmp")
        port = free_port()
        config = os.path.join(work, "storaged.properties")
        with open(config, "w") as f:
            f.write(f"node.id=1\nlog.dirs={work}/logs\n")
            f.write(f"runnel.run.dir={work}/run\nmetadata.log.dir={work}/metadata\n")
            f.write(f"runnel.http.listener=http://127.0.0.1:{port}\n")
        env = {k: v for k, v in os.environ.items() if k != "RUNNEL_SUPERVISED"}
        log = open(os.path.join(work, "storaged.log"), "w")
        proc = subprocess.Popen([os.path.join(BIN_DIR, "runnel-storaged"), "--config", config],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_until(lambda: http_get(port, "/readyz")[0] == 200, 30, "storaged /readyz 200")
            self.assertEqual(http_get(port, "/healthz")[0], 200)
            status, text = http_get(port, "/metrics")
            self.assertEqual(status, 200)
            m = parse_metrics(text)
            self.assertGreater(value(m, "process_resident_memory_bytes", role="storaged"), 0)
            self.assertIsNotNone(value(m, "runnel_storage_appends_total", role="storaged"))
            code, out = promtool_check(text)
            self.assertEqual(code, 0, out)
        finally:
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=30), 0)
            log.close()
            with open(os.path.join(work, "storaged.log"), errors="replace") as f:
                logged = f.read()
            shutil.rmtree(work, ignore_errors=True)
        self.assertNotIn("ERROR: AddressSanitizer", logged)


if __name__ == "__main__":
    unittest.main()
