"""Transactions on the partition side: transaction markers written by WriteTxnMarkers (key
27), the last stable offset, the aborted transactions of a read_committed Fetch, ListOffsets
read_committed, and the transaction index (.txnindex) through a kill -9 of storaged.

The producers are hand-built: InitProducerId (no transactional id) gives a producer id, and
a Produce of a batch with the transactional flag opens a transaction on its partition (as a
transactional producer's first batch does once AddPartitionsToTxn succeeded). The markers
are sent by hand, as a transaction coordinator (or `kafka-transactions.sh abort`) does.
librdkafka with isolation.level=read_committed reads the committed records, never the
aborted ones, and nothing at or past an open transaction. When Apache Kafka's tools are in
the peers cache already (`make peers`), `kafka-transactions abort` ends a hanging transaction
(skipped otherwise).
"""
import os
import shutil
import struct
import subprocess
import threading
import time
import unittest

from harness import Node, wait_until
from kafka_wire import ApiReader, ApiWriter, Connection, batch_headers, crc32c, encode_record
from test_idempotence import init_producer_id

FETCH = 1
LIST_OFFSETS = 2
WRITE_TXN_MARKERS = 27

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_RECORD = 87
TRANSACTION_COORDINATOR_FENCED = 52
INVALID_PRODUCER_EPOCH = 47

TOPIC = "txns"
KAFKA_PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                           "peers", "kafka")
PEERS_UNAVAILABLE = 3  # scripts/peers/kafka's exit status when Kafka's jars cannot be had
TRANSACTIONAL = 0x10
CONTROL = 0x20


def producer_batch(values, producer_id, epoch, sequence, attributes=TRANSACTIONAL,
                   timestamp_ms=None):
    """One uncompressed batch of `values` from a producer."""
    ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    records = b"".join(encode_record(i, 0, None, v) for i, v in enumerate(values))
    n = len(values)
    after_crc = struct.pack(">hiqqqhii", attributes, n - 1, ts, ts, producer_id, epoch, sequence,
                            n) + records
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2,
                       crc32c(after_crc)) + after_crc


def write_txn_markers(conn, markers, version=1):
    """markers: [(producer id, epoch, commit, coordinator epoch, {topic: [partitions]})].
    Answers [(producer id, [(topic, partition, error)])]."""
    w = ApiWriter(flexible=True)

    def marker(w, m):
        pid, epoch, commit, coordinator_epoch, topics = m
        w.i64(pid).i16(epoch).i8(1 if commit else 0)
        w.array(list(topics.items()),
                lambda w, t: w.string(t[0]).array(t[1], lambda w, p: w.i32(p)).tags())
        w.i32(coordinator_epoch)
        if version >= 2:
            w.i8(0)
        w.tags()

    w.array(markers, marker).tags()
    r = conn.call(WRITE_TXN_MARKERS, version, w)

    def topic(r):
        name = r.string()
        parts = r.array(lambda r: (r.i32(), r.i16(), r.tags())[:2])
        r.tags()
        return name, parts

    out = []
    for pid, topics in r.array(lambda r: (r.i64(), r.array(topic), r.tags())[:2]):
        out.append((pid, [(name, p, e) for name, parts in topics for p, e in parts]))
    return out


def fetch(conn, offset, isolation, max_wait_ms=0):
    """Fetch v4 of partition 0: (error, high watermark, last stable offset, aborted
    transactions (None when null), record bytes)."""
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, 1 << 20, isolation) + struct.pack(">i", 1)
    body += struct.pack(">h", len(TOPIC)) + TOPIC.encode() + struct.pack(">i", 1)
    body += struct.pack(">iqi", 0, offset, 1 << 20)
    r = ApiReader(conn.request(FETCH, 4, body))
    r.take(">i")
    assert r.take(">i") == 1  # topics
    r.string()
    assert r.take(">i") == 1  # partitions
    _index, error, high_watermark, last_stable = r.take(">ihqq")
    count = r.take(">i")
    aborted = None if count < 0 else [r.take(">qq") for _ in range(count)]
    return error, high_watermark, last_stable, aborted, r.bytes() or b""


def list_offset(conn, timestamp, isolation):
    """ListOffsets v2 of partition 0: (error, timestamp, offset)."""
    body = struct.pack(">ib", -1, isolation) + struct.pack(">i", 1)
    body += struct.pack(">h", len(TOPIC)) + TOPIC.encode()
    body += struct.pack(">i", 1) + struct.pack(">iq", 0, timestamp)
    r = ApiReader(conn.request(LIST_OFFSETS, 2, body))
    r.take(">i")
    r.take(">i")
    r.string()
    r.take(">i")
    _index, error, ts, offset = r.take(">ihqq")
    return error, ts, offset


class TxnMarkersTest(unittest.TestCase):
    def setUp(self):
        self.node = Node().start()
        self.addCleanup(self.node.cleanup)
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)], operation_timeout=20)[TOPIC].result(30)
        wait_until(lambda: TOPIC in admin.list_topics(TOPIC, timeout=5).topics and
                   not admin.list_topics(TOPIC, timeout=5).topics[TOPIC].error, 20,
                   "the topic in the metadata")
        self.conn = Connection(self.node.bootstrap)
        self.addCleanup(self.conn.close)

    def produce(self, batch):
        """Produce v3 of one batch to partition 0: (error, base offset). A transactional batch
        needs the request's transactional id; this one has no coordinator (no
        __transaction_state exists), so its partition is not verified (KIP-890)."""
        answer = self.conn.produce(3, -1, TOPIC, {0: batch},
                                   transactional_id="hand-built")[(TOPIC, 0)]
        return answer["error"], answer["base_offset"]

    def produce_ok(self, batch):
        """The base offset of an accepted batch."""
        error, base_offset = self.produce(batch)
        self.assertEqual(error, NONE)
        return base_offset

    def read_committed_values(self, expected, quiet_s=2.0, timeout_s=30):
        """What a librdkafka read_committed consumer reads from offset 0: it must reach
        `expected` in time, then nothing more for `quiet_s`."""
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": "rc",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 100})
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            got = []
            deadline = time.monotonic() + timeout_s
            while len(got) < len(expected) and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got.append(msg.value())
            quiet_until = time.monotonic() + quiet_s
            while time.monotonic() < quiet_until:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got.append(msg.value())
            return got
        finally:
            consumer.close()

    def test_markers_lso_aborted_transactions_and_a_storaged_kill(self):
        conn = self.conn
        pids = []
        for _ in range(3):
            error, pid, epoch = init_producer_id(conn, 1)
            self.assertEqual((error, epoch), (NONE, 0))
            pids.append(pid)
        a, b, c = pids
        # 0..1 plain; A's transaction 2..3; B's 4; A aborted (5); B committed (6); C's open
        # transaction 7; a plain record after it, 8.
        self.assertEqual(self.produce_ok(producer_batch([b"p0", b"p1"], -1, -1, -1, 0)), 0)
        self.assertEqual(self.produce_ok(producer_batch([b"a0", b"a1"], a, 0, 0)), 2)
        self.assertEqual(self.produce_ok(producer_batch([b"b0"], b, 0, 0)), 4)
        # A client may not write a marker itself.
        marker = producer_batch([b"x"], a, 0, 2, TRANSACTIONAL | CONTROL)
        self.assertEqual(self.produce(marker)[0], INVALID_RECORD)
        self.assertEqual(write_txn_markers(conn, [(a, 0, False, 5, {TOPIC: [0]})]),
                         [(a, [(TOPIC, 0, NONE)])])
        self.assertEqual(write_txn_markers(conn, [(b, 0, True, 5, {TOPIC: [0]})], version=2),
                         [(b, [(TOPIC, 0, NONE)])])
        self.assertEqual(self.produce_ok(producer_batch([b"c0"], c, 0, 0)), 7)
        self.assertEqual(self.produce_ok(producer_batch([b"p2"], -1, -1, -1, 0)), 8)

        # Kafka's per-partition errors.
        self.assertEqual(
            write_txn_markers(conn, [(a, 0, True, 5, {"nope": [0], TOPIC: [7]}),
                                     (a, 0, True, 4, {TOPIC: [0]})]),
            [(a, [("nope", 0, UNKNOWN_TOPIC_OR_PARTITION), (TOPIC, 7, UNKNOWN_TOPIC_OR_PARTITION)]),
             (a, [(TOPIC, 0, TRANSACTION_COORDINATOR_FENCED)])])

        def check_committed_view(end):
            error, hw, lso, aborted, records = fetch(conn, 0, 1)
            self.assertEqual((error, hw, lso), (NONE, end, 7))
            self.assertEqual(aborted, [(a, 2)])
            self.assertEqual([h["base_offset"] for h in batch_headers(records)], [0, 2, 4, 5, 6])
            error, hw, lso, aborted, records = fetch(conn, 0, 0)
            self.assertEqual((error, hw, lso, aborted), (NONE, end, 7, None))
            self.assertEqual(batch_headers(records)[-1]["base_offset"], end - 1)
            # At the last stable offset there is nothing to read yet; past A's marker, no
            # aborted transaction is listed.
            self.assertEqual(fetch(conn, 7, 1)[3:], ([], b""))
            self.assertEqual(fetch(conn, 6, 1)[3], [])
            self.assertEqual(list_offset(conn, -1, 1), (NONE, -1, 7))
            self.assertEqual(list_offset(conn, -1, 0), (NONE, -1, end))

        check_committed_view(9)
        self.assertEqual(self.read_committed_values([b"p0", b"p1", b"b0"]),
                         [b"p0", b"p1", b"b0"])

        # storaged killed: the index, the open transaction and the last stable offset stay.
        txn_index = os.path.join(self.node.dir, "logs", f"{TOPIC}-0", "00000000000000000000.txnindex")
        self.assertEqual(os.path.getsize(txn_index), 34)
        pid = self.node.kill_role("storaged")
        self.node.wait_role_restarted("storaged", pid)
        wait_until(self.node.kafka_ready, 60, "storaged back")

        def answers():
            try:
                return fetch(conn, 0, 1)[0] == NONE
            except OSError:
                return False
        wait_until(answers, 30, "read_committed fetches answered again")
        check_committed_view(9)
        self.assertEqual(os.path.getsize(txn_index), 34)

        # C commits: the last stable offset moves to the end, and a waiting read_committed
        # long poll wakes for it.
        self.assertEqual(write_txn_markers(conn, [(c, 0, True, 5, {TOPIC: [0]})]),
                         [(c, [(TOPIC, 0, NONE)])])
        error, hw, lso, aborted, _ = fetch(conn, 7, 1)
        self.assertEqual((error, hw, lso, aborted), (NONE, 10, 10, []))
        self.assertEqual(list_offset(conn, -1, 1), (NONE, -1, 10))
        self.assertEqual(self.read_committed_values([b"p0", b"p1", b"b0", b"c0", b"p2"]),
                         [b"p0", b"p1", b"b0", b"c0", b"p2"])

    def test_a_read_committed_long_poll_wakes_when_a_transaction_ends(self):
        conn = self.conn
        error, pid, _ = init_producer_id(conn, 1)
        self.assertEqual(error, NONE)
        self.assertEqual(self.produce_ok(producer_batch([b"t0"], pid, 0, 0)), 0)
        waiter = Connection(self.node.bootstrap)
        self.addCleanup(waiter.close)
        answer = {}

        def poll():
            answer["fetch"] = fetch(waiter, 0, 1, max_wait_ms=10000)
            answer["at"] = time.monotonic()

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.5)
        self.assertNotIn("fetch", answer)  # waiting: offset 0 is the last stable offset
        sent = time.monotonic()
        self.assertEqual(write_txn_markers(conn, [(pid, 0, True, 0, {TOPIC: [0]})]),
                         [(pid, [(TOPIC, 0, NONE)])])
        thread.join(15)
        self.assertFalse(thread.is_alive())
        error, hw, lso, aborted, records = answer["fetch"]
        self.assertEqual((error, hw, lso, aborted), (NONE, 2, 2, []))
        self.assertEqual([h["base_offset"] for h in batch_headers(records)], [0, 1])
        self.assertLess(answer["at"] - sent, 5.0)

    def test_kafka_transactions_abort_ends_a_hanging_transaction(self):
        if not shutil.which("java"):
            self.skipTest("no java on PATH")
        # Only a peers cache already prepared (`make peers`): CI does not download Kafka here.
        cache = os.environ.get("RUNNEL_PEERS_CACHE") or os.path.expanduser("~/.cache/runnel-peers")
        if not os.path.isdir(os.path.join(cache, "m2")):
            self.skipTest("Apache Kafka's tools are not in the peers cache (make peers)")
        prepared = subprocess.run([KAFKA_PEERS, "prepare"], capture_output=True, text=True,
                                  timeout=300)
        if prepared.returncode != 0:
            self.skipTest(f"Apache Kafka's tools are not available ({prepared.returncode})")
        conn = self.conn
        error, pid, _ = init_producer_id(conn, 1)
        self.assertEqual(error, NONE)
        self.assertEqual(self.produce_ok(producer_batch([b"h0", b"h1"], pid, 0, 0)), 0)
        self.assertEqual(self.produce_ok(producer_batch([b"after"], -1, -1, -1, 0)), 2)
        self.assertEqual(fetch(conn, 0, 1)[2], 0)  # the hanging transaction holds the LSO
        out = subprocess.run(
            [KAFKA_PEERS, "tool", "kafka-transactions", "--bootstrap-server", self.node.bootstrap,
             "abort", "--topic", TOPIC, "--partition", "0", "--producer-id", str(pid),
             "--producer-epoch", "0", "--coordinator-epoch", "0"],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        error, hw, lso, aborted, records = fetch(conn, 0, 1)
        self.assertEqual((error, hw, lso, aborted), (NONE, 4, 4, [(pid, 0)]))
        self.assertEqual([h["base_offset"] for h in batch_headers(records)], [0, 2, 3])
        self.assertEqual(self.read_committed_values([b"after"]), [b"after"])


if __name__ == "__main__":
    unittest.main()
