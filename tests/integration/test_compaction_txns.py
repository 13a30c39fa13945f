"""Compaction of a topic written by transactions (Kafka's cleaner rules): aborted data goes
(and does not make the older record of its key go), a marker stays while its transaction
has data, gets a delete horizon once it has none and goes after it, the aborted transaction
leaves the .txnindex, and an open transaction holds the cleaner at the last stable offset.
librdkafka consumers, read_committed and read_uncommitted, read what they would from Kafka.

The producers are hand-built as in test_txn_markers (InitProducerId, transactional batches,
WriteTxnMarkers). segment.bytes=14 puts every batch in a segment of its own, so each append
makes the previous batch cleanable; log.cleaner.backoff.ms is short, so passes follow.
"""
import glob
import os
import struct
import time
import unittest

from harness import Node, wait_until
from kafka_wire import Connection, batch_headers, crc32c, encode_record
from test_idempotence import init_producer_id
from test_txn_markers import TOPIC, TRANSACTIONAL, fetch, write_txn_markers

NONE = 0
RETENTION_MS = 1000  # delete.retention.ms


def keyed_batch(records, producer_id=-1, epoch=-1, sequence=-1, attributes=0):
    """One uncompressed batch of (key, value) records, now."""
    ts = int(time.time() * 1000)
    body = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(records))
    n = len(records)
    after_crc = struct.pack(">hiqqqhii", attributes, n - 1, ts, ts, producer_id, epoch, sequence,
                            n) + body
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2,
                       crc32c(after_crc)) + after_crc


class CompactionTxnsTest(unittest.TestCase):
    def setUp(self):
        self.node = Node({"log.cleaner.backoff.ms": "100"}).start()
        self.addCleanup(self.node.cleanup)
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        configs = {"cleanup.policy": "compact", "segment.bytes": "14",
                   "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(RETENTION_MS)}
        admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)],
                            operation_timeout=20)[TOPIC].result(30)
        wait_until(lambda: TOPIC in admin.list_topics(TOPIC, timeout=5).topics and
                   not admin.list_topics(TOPIC, timeout=5).topics[TOPIC].error, 20,
                   "the topic in the metadata")
        self.conn = Connection(self.node.bootstrap)
        self.addCleanup(self.conn.close)

    def produce(self, batch):
        answer = self.conn.produce(3, -1, TOPIC, {0: batch},
                                   transactional_id="hand-built")[(TOPIC, 0)]
        self.assertEqual(answer["error"], NONE)
        return answer["base_offset"]

    def marker(self, pid, commit):
        self.assertEqual(write_txn_markers(self.conn, [(pid, 0, commit, 0, {TOPIC: [0]})]),
                         [(pid, [(TOPIC, 0, NONE)])])

    def bases(self):
        """The base offsets of the stored batches (read_uncommitted fetch)."""
        error, _hw, _lso, _aborted, records = fetch(self.conn, 0, 0)
        self.assertEqual(error, NONE)
        return [h["base_offset"] for h in batch_headers(records)]

    def consume(self, isolation, expected):
        """(offset, key, value) of what a librdkafka consumer with `isolation` reads from
        offset 0: `expected` in time, then nothing more for half a second."""
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": "c",
                             "isolation.level": isolation, "enable.auto.commit": False,
                             "fetch.wait.max.ms": 50})
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            got = []
            deadline = time.monotonic() + 10
            quiet_until = None
            while time.monotonic() < deadline:
                if len(got) >= len(expected) and quiet_until is None:
                    quiet_until = time.monotonic() + 0.5
                if quiet_until is not None and time.monotonic() > quiet_until:
                    break
                msg = consumer.poll(0.05)
                if msg is not None and not msg.error():
                    got.append((msg.offset(), msg.key(), msg.value()))
            return got
        finally:
            consumer.close()

    def test_aborted_data_markers_and_an_open_transaction(self):
        pids = []
        for _ in range(3):
            error, pid, epoch = init_producer_id(self.conn, 1)
            self.assertEqual((error, epoch), (NONE, 0))
            pids.append(pid)
        a, b, c = pids
        txn = TRANSACTIONAL
        self.assertEqual(self.produce(keyed_batch([(b"k1", b"v1")])), 0)
        self.assertEqual(self.produce(keyed_batch([(b"k1", b"a1")], a, 0, 0, txn)), 1)
        self.assertEqual(self.produce(keyed_batch([(b"k2", b"b1")], b, 0, 0, txn)), 2)
        self.marker(a, False)  # 3: A aborted; k1=a1 must not make k1=v1 go
        self.marker(b, True)   # 4
        self.assertEqual(self.produce(keyed_batch([(b"k3", b"a2")], a, 0, 1, txn)), 5)
        self.marker(a, True)   # 6
        self.assertEqual(self.produce(keyed_batch([(b"f0", b"f0")])), 7)
        log_dir = os.path.join(self.node.dir, "logs", f"{TOPIC}-0")

        # The aborted batch goes; the abort marker stays while this pass met its data.
        wait_until(lambda: 1 not in self.bases(), 10, "the aborted batch compacted away")
        # A later pass finds the transaction empty: its index entry goes, then, past
        # delete.retention.ms, its marker. Each filler makes the log dirty for another pass.
        fillers = [(b"f0", b"f0")]
        deadline = time.monotonic() + RETENTION_MS / 1000 + 8
        while 3 in self.bases() and time.monotonic() < deadline:
            key = b"f%d" % len(fillers)
            self.produce(keyed_batch([(key, key)]))
            fillers.append((key, key))
            time.sleep(0.25)
        self.assertNotIn(3, self.bases())
        self.assertEqual(self.bases()[:4], [0, 2, 4, 5])  # COMMITs of B (4) and A (6) stay
        self.assertIn(6, self.bases())
        self.assertEqual(fetch(self.conn, 0, 1)[3], [])  # no aborted transaction listed
        self.assertEqual(glob.glob(os.path.join(log_dir, "*.txnindex")), [])
        expected = [(0, b"k1", b"v1"), (2, b"k2", b"b1"), (5, b"k3", b"a2")]
        expected += [(7 + i, k, v) for i, (k, v) in enumerate(fillers)]
        self.assertEqual(self.consume("read_committed", expected), expected)
        self.assertEqual(self.consume("read_uncommitted", expected), expected)

        # C's open transaction writes k1 again: the cleaner stops at it, so k1=v1 stays
        # (a filler after it gives the cleaner a dirty segment below the last stable offset).
        c_offset = self.produce(keyed_batch([(b"k1", b"c1")], c, 0, 0, txn))
        self.assertEqual(self.produce(keyed_batch([(b"g", b"g")])), c_offset + 1)
        self.assertEqual(self.produce(keyed_batch([(b"h", b"h")])), c_offset + 2)
        time.sleep(0.6)  # several cleaner backoffs
        self.assertIn(0, self.bases())
        self.assertEqual(fetch(self.conn, 0, 1)[2], c_offset)  # the last stable offset
        # Committed, it is a record as any other: k1=v1 goes at the next pass.
        self.marker(c, True)
        self.assertEqual(self.produce(keyed_batch([(b"i", b"i")])), c_offset + 4)
        wait_until(lambda: 0 not in self.bases(), 10, "k1=v1 compacted away after the commit")
        final = expected[1:] + [(c_offset, b"k1", b"c1"), (c_offset + 1, b"g", b"g"),
                                (c_offset + 2, b"h", b"h"), (c_offset + 4, b"i", b"i")]
        self.assertEqual(self.consume("read_uncommitted", final), final)
        self.assertEqual(self.consume("read_committed", final), final)


if __name__ == "__main__":
    unittest.main()
