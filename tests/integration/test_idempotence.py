"""The idempotent producer: producer ids from InitProducerId, and every acknowledged record
present exactly once, in order per partition, while storaged and brokerd are each kill -9'd
twice and the client's connections are cut.

InitProducerId is checked by hand-built requests (v0-v5): each answer is a new id with
epoch 0, ids are unique across restarts of brokerd and of the whole node (the controller
hands them out in blocks it writes to the metadata log), a request naming only one of
producer id and epoch is INVALID_REQUEST.

The fault run uses librdkafka (rdkafka_client.cc seq-produce) with enable.idempotence=true
and 5 requests in flight. The node advertises a TCP proxy on loopback, so that every
connection of the client goes through it and the test can cut them all (RST) while records
are in flight. RUNNEL_IDEMPOTENCE_RECORDS overrides the run's size.
"""
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from harness import BIN_DIR, Node, free_port, wait_until
from kafka_clients import read_seqs, seq_summary
from kafka_wire import ApiReader, ApiWriter, Connection

INIT_PRODUCER_ID = 22

NONE = 0
NOT_COORDINATOR = 16
INVALID_REQUEST = 42

RECORDS = int(os.environ.get("RUNNEL_IDEMPOTENCE_RECORDS", "1000000"))
PARTITIONS = 4
VALUE_BYTES = 32

PRODUCER = {
    "acks": "all",
    "enable.idempotence": "true",
    "max.in.flight.requests.per.connection": "5",
    "retry.backoff.ms": "100",
    "message.timeout.ms": "300000",
    "linger.ms": "5",
    "reconnect.backoff.max.ms": "500",
    "test.timeout.ms": "360000",
}


def init_producer_id(conn, version, transactional_id=None, producer_id=-1, epoch=-1,
                     timeout_ms=60000):
    """(error, producer id, epoch) of one InitProducerId."""
    flexible = version >= 2
    w = ApiWriter(flexible).string(transactional_id).i32(timeout_ms)
    if version >= 3:
        w.i64(producer_id).i16(epoch)
    w.tags()
    if flexible:
        r = conn.call(INIT_PRODUCER_ID, version, w)
    else:
        r = ApiReader(conn.request(INIT_PRODUCER_ID, version, w.buf))
    r.i32()  # throttle time
    return r.i16(), r.i64(), r.i16()


class CuttingProxy:
    """Forwards every connection to 127.0.0.1:`target`; cut() resets them all."""

    def __init__(self, port, target):
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.lock = threading.Lock()
        self.sockets = []
        self.cuts = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            sockets, self.sockets = self.sockets, []
            self.cuts += 1
        for s in sockets:
            try:  # a reset, not a clean close: the client sees its requests fail mid-flight
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass
        return len(sockets) // 2

    def close(self):
        self.closed = True
        self.listener.close()
        self.cut()


class InitProducerIdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = Node().start()

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def test_every_version_gives_a_new_id_with_epoch_zero(self):
        conn = Connection(self.node.bootstrap)
        ids = set()
        self.addCleanup(conn.sock.close)
        for version in range(6):
            error, pid, epoch = init_producer_id(conn, version)
            self.assertEqual((error, epoch), (NONE, 0), f"v{version}")
            self.assertGreaterEqual(pid, 0)
            ids.add(pid)
        # v3+: an idempotent producer naming its id and epoch gets a new id (Kafka's way).
        error, pid, epoch = init_producer_id(conn, 4, producer_id=max(ids), epoch=0)
        self.assertEqual((error, epoch), (NONE, 0))
        ids.add(pid)
        self.assertEqual(len(ids), 7, ids)

    def test_bad_requests(self):
        conn = Connection(self.node.bootstrap)
        self.addCleanup(conn.sock.close)
        self.assertEqual(init_producer_id(conn, 4, producer_id=5, epoch=-1), (INVALID_REQUEST, -1, -1))
        self.assertEqual(init_producer_id(conn, 4, producer_id=-1, epoch=3), (INVALID_REQUEST, -1, -1))
        # A transactional id before any FindCoordinator made __transaction_state: this broker
        # is not its coordinator (test_transactions.py covers transactional ids).
        self.assertEqual(init_producer_id(conn, 4, transactional_id="tx"),
                         (NOT_COORDINATOR, -1, -1))

    def test_ids_are_unique_across_restarts(self):
        ids = set()

        def take(n):
            conn = Connection(self.node.bootstrap)
            try:
                for _ in range(n):
                    error, pid, _ = init_producer_id(conn, 5)
                    self.assertEqual(error, NONE)
                    self.assertNotIn(pid, ids)
                    ids.add(pid)
            finally:
                conn.sock.close()

        take(50)
        pid = self.node.kill_role("brokerd")
        self.node.wait_role_restarted("brokerd", pid)
        wait_until(self.node.kafka_ready, 60, "brokerd back")
        take(50)
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        take(50)
        self.assertEqual(len(ids), 150)


class IdempotentProducerFaultTest(unittest.TestCase):
    def setUp(self):
        self.proxy_port = free_port()
        self.node = Node({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.proxy_port}"})
        self.proxy = CuttingProxy(self.proxy_port, self.node.port)
        self.node.start()
        self.tmp = tempfile.mkdtemp(prefix="rnl-idem-", dir="/tmp")

    def tearDown(self):
        try:
            self.proxy.close()
            self.node.cleanup()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def client(self, *args):
        return [os.path.join(BIN_DIR, "rdkafka_client"), "c", *args]

    def create_topic(self, name):
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.proxy_port}"})
        admin.create_topics([NewTopic(name, PARTITIONS, 1)], operation_timeout=20)[name].result(30)
        wait_until(lambda: len(admin.list_topics(name, timeout=5).topics[name].partitions) ==
                   PARTITIONS, 20, f"topic {name} in the metadata")

    def test_exactly_once_in_order_through_kills_and_cuts(self):
        topic = "idem"
        self.create_topic(topic)
        acked_path = os.path.join(self.tmp, "acked")
        props = dict(PRODUCER, **{"test.progress.every": "1000"})
        proc = subprocess.Popen(
            self.client("seq-produce", f"127.0.0.1:{self.proxy_port}", topic, str(PARTITIONS),
                        str(RECORDS), str(VALUE_BYTES), acked_path,
                        *[f"{k}={v}" for k, v in props.items()]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        progress = {"acked": 0, "done": None}
        stderr = []

        def read_stdout():
            for line in proc.stdout:
                if line.startswith("acked "):
                    progress["acked"] = int(line.split()[1])
                elif line.startswith("done "):
                    progress["done"] = seq_summary(line)

        def read_stderr():
            for line in proc.stderr:
                stderr.append(line)
                del stderr[:-50]

        threads = [threading.Thread(target=read_stdout), threading.Thread(target=read_stderr)]
        for t in threads:
            t.start()

        def kill(role):
            pid = self.node.kill_role(role)
            self.node.wait_role_restarted(role, pid)

        # Each fault once a further share of the records is acknowledged, so that every one
        # lands in the middle of the run, with requests in flight.
        faults = [("cut", None), ("kill", "storaged"), ("kill", "brokerd"), ("cut", None),
                  ("kill", "storaged"), ("kill", "brokerd"), ("cut", None)]
        try:
            for i, (what, role) in enumerate(faults):
                goal = RECORDS * (i + 1) // (len(faults) + 2)
                deadline = time.monotonic() + 300
                while progress["acked"] < goal and proc.poll() is None:
                    self.assertLess(time.monotonic(), deadline,
                                    f"acks stalled at {progress['acked']} before fault {i}: "
                                    + "".join(stderr[-10:]))
                    time.sleep(0.01)
                self.assertIsNone(proc.poll(), f"the producer finished before fault {i}")
                if what == "cut":
                    self.assertGreater(self.proxy.cut(), 0, "no connection to cut")
                else:
                    kill(role)
            proc.wait(timeout=400)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            for t in threads:
                t.join(10)
        produced = progress["done"]
        self.assertIsNotNone(produced, "".join(stderr))
        self.assertEqual(proc.returncode, 0, "".join(stderr))
        self.assertEqual((produced["acked"], produced["failed"]), (RECORDS, 0), produced)

        seq_path = os.path.join(self.tmp, "consumed")
        out = subprocess.run(self.client("seq-consume", f"127.0.0.1:{self.proxy_port}", topic,
                                         str(PARTITIONS), seq_path, "test.timeout.ms=300000"),
                             capture_output=True, text=True, timeout=400)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        consumed = seq_summary(out.stdout.strip().splitlines()[-1])
        self.assertEqual(consumed["corrupt"], 0)
        seqs = read_seqs(seq_path)
        counts = bytearray(RECORDS)
        last = [-1] * PARTITIONS  # per partition, the last sequence number read
        out_of_order = 0
        for s in seqs:
            self.assertLess(s, RECORDS)
            counts[s] = min(counts[s] + 1, 255)
            p = s % PARTITIONS
            if s <= last[p]:
                out_of_order += 1
            last[p] = max(last[p], s)
        duplicates = sum(c - 1 for c in counts if c > 1)
        missing = counts.count(0)
        print(f"\nidempotent run: {RECORDS} records, {self.proxy.cuts} cuts, read {len(seqs)}, "
              f"duplicates {duplicates}, missing {missing}, out of order {out_of_order}")
        self.assertEqual((duplicates, missing, out_of_order), (0, 0, 0))
        self.assertEqual(consumed["checksum"], produced["checksum"])


if __name__ == "__main__":
    unittest.main()
