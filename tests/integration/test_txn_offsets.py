"""Transactional offset commits (TxnOffsetCommit, key 28) by hand-built requests.

Checked: ApiVersions advertises v0-v6; a TxnOffsetCommit (v0 and v3) is accepted with Kafka's
per-partition and group errors (unknown topic or partition, a generation for a group that
does not exist, oversized metadata); its offsets stay pending: OffsetFetch v7 with
require_stable answers UNSTABLE_OFFSET_COMMIT for them and without it the last committed
offset; a node restart rebuilds them so. A COMMIT marker written by hand (WriteTxnMarkers,
key 27) to the group's __consumer_offsets partition makes them the committed offsets, an ABORT
drops them, and a node restart rebuilds both outcomes from the log. No producer (id -1) is
INVALID_PRODUCER_ID_MAPPING.
"""
import unittest

from harness import wait_until
from kafka_clients import RunnelTarget
from kafka_wire import ApiReader, ApiWriter, Connection

WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
INIT_PRODUCER_ID = 22

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INVALID_PRODUCER_ID_MAPPING = 49
UNSTABLE_OFFSET_COMMIT = 88

TOPIC = "txo-t"


class Conn(Connection):
    """The requests of this test, by hand."""

    def find_coordinator(self, group):
        """FindCoordinator v3: the error code."""
        r = self.call(FIND_COORDINATOR, 3, ApiWriter(True).string(group).i8(0).tags())
        r.i32()
        return r.i16()

    def init_producer_id(self):
        """InitProducerId v4 without a transactional id: (error, producer id, epoch)."""
        w = ApiWriter(True).string(None).i32(60000).i64(-1).i16(-1).tags()
        r = self.call(INIT_PRODUCER_ID, 4, w)
        r.i32()
        return r.i16(), r.i64(), r.i16()

    def txn_offset_commit(self, group, pid, epoch, offsets, version=3, generation=-1,
                          member_id="", metadata="m"):
        """TxnOffsetCommit: {(topic, partition): error}. `offsets` is {(topic, partition): offset}."""
        flexible = version >= 3
        by_topic = {}
        for (t, p), o in offsets.items():
            by_topic.setdefault(t, []).append((p, o))
        w = ApiWriter(flexible).string("txo-tx").string(group).i64(pid).i16(epoch)
        if version >= 3:
            w.i32(generation).string(member_id).string(None)

        def partition(w, item):
            p, o = item
            w.i32(p).i64(o)
            if version >= 2:
                w.i32(-1)
            w.string(metadata)
            if flexible:
                w.tags()

        def topic(w, item):
            w.string(item[0])
            w.array(item[1], partition)
            if flexible:
                w.tags()

        w.array(sorted(by_topic.items()), topic)
        if flexible:
            w.tags()
            r = self.call(TXN_OFFSET_COMMIT, version, w)
        else:
            r = ApiReader(self.request(TXN_OFFSET_COMMIT, version, w.buf))
        r.i32()
        out = {}

        def read_partition(r):
            p, e = r.i32(), r.i16()
            if flexible:
                r.tags()
            return p, e

        def read_topic(r):
            name = r.string()
            for p, e in r.array(read_partition):
                out[(name, p)] = e
            if flexible:
                r.tags()

        r.array(read_topic)
        return out

    def offset_fetch(self, group, partitions, require_stable):
        """OffsetFetch v7: (group error, {(topic, partition): (offset, error)})."""
        by_topic = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        w = ApiWriter(True).string(group)
        w.array(sorted(by_topic.items()),
                lambda w, item: w.string(item[0]).array(item[1], lambda w, p: w.i32(p)).tags())
        w.i8(1 if require_stable else 0).tags()
        r = self.call(OFFSET_FETCH, 7, w)
        r.i32()
        out = {}

        def read_partition(r):
            p, offset = r.i32(), r.i64()
            r.i32()
            r.string()
            error = r.i16()
            r.tags()
            return p, offset, error

        def read_topic(r):
            name = r.string()
            for p, offset, error in r.array(read_partition):
                out[(name, p)] = (offset, error)
            r.tags()

        r.array(read_topic)
        error = r.i16()
        return error, out

    def write_marker(self, pid, epoch, commit, partitions):
        """WriteTxnMarkers v1, one marker: {(topic, partition): error}."""
        by_topic = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        w = ApiWriter(True)

        def marker(w, _):
            w.i64(pid).i16(epoch).i8(1 if commit else 0)
            w.array(sorted(by_topic.items()),
                    lambda w, item: w.string(item[0]).array(item[1], lambda w, p: w.i32(p)).tags())
            w.i32(0).tags()

        w.array([None], marker).tags()
        r = self.call(WRITE_TXN_MARKERS, 1, w)
        out = {}

        def read_partition(r):
            p, e = r.i32(), r.i16()
            r.tags()
            return p, e

        def read_topic(r):
            name = r.string()
            for p, e in r.array(read_partition):
                out[(name, p)] = e
            r.tags()

        def read_marker(r):
            r.i64()
            r.array(read_topic)
            r.tags()

        r.array(read_marker)
        return out


def wait_coordinator(conn, group):
    """Waits until `group`'s coordinator is found and its shard has loaded."""
    def ready():
        if conn.find_coordinator(group) != NONE:
            return False
        error, _ = conn.offset_fetch(group, [(TOPIC, 0)], False)
        return error not in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                             NOT_COORDINATOR)
    wait_until(ready, 60, f"a coordinator for {group}", interval=0.2)


class TxnOffsetsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # One __consumer_offsets partition: every group is on partition 0.
        cls.target = RunnelTarget({"offsets.topic.num.partitions": "1"})
        cls.target.create_topic(TOPIC, 2)

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    def setUp(self):
        self.conn = Conn(self.target.bootstrap)

    def tearDown(self):
        self.conn.close()

    def producer(self):
        error, pid, epoch = self.conn.init_producer_id()
        self.assertEqual(error, NONE)
        return pid, epoch

    def test_api_versions(self):
        self.assertEqual(self.conn.api_versions()[TXN_OFFSET_COMMIT], (0, 6))

    def test_errors(self):
        group = "txo-errors"
        wait_coordinator(self.conn, group)
        pid, epoch = self.producer()
        got = self.conn.txn_offset_commit(
            group, pid, epoch, {(TOPIC, 0): 1, (TOPIC, 9): 1, ("txo-missing", 0): 1})
        self.assertEqual(got, {(TOPIC, 0): NONE, (TOPIC, 9): UNKNOWN_TOPIC_OR_PARTITION,
                               ("txo-missing", 0): UNKNOWN_TOPIC_OR_PARTITION})
        # A generation for a group that does not exist.
        got = self.conn.txn_offset_commit("txo-nogroup", pid, epoch, {(TOPIC, 0): 1},
                                          generation=3, member_id="m")
        self.assertEqual(got, {(TOPIC, 0): ILLEGAL_GENERATION})
        got = self.conn.txn_offset_commit(group, pid, epoch, {(TOPIC, 1): 1},
                                          metadata="x" * 5000)
        self.assertEqual(got, {(TOPIC, 1): OFFSET_METADATA_TOO_LARGE})
        # No producer.
        got = self.conn.txn_offset_commit(group, -1, -1, {(TOPIC, 1): 1})
        self.assertEqual(got, {(TOPIC, 1): INVALID_PRODUCER_ID_MAPPING})

    def test_pending_offsets_are_unstable(self):
        group = "txo-pending"
        wait_coordinator(self.conn, group)
        pid, epoch = self.producer()
        for version in (0, 3):
            got = self.conn.txn_offset_commit(group, pid, epoch, {(TOPIC, version % 2): 42},
                                              version=version)
            self.assertEqual(got, {(TOPIC, version % 2): NONE}, version)
        error, got = self.conn.offset_fetch(group, [(TOPIC, 0), (TOPIC, 1)], True)
        self.assertEqual(error, NONE)
        self.assertEqual(got[(TOPIC, 0)][1], UNSTABLE_OFFSET_COMMIT)
        self.assertEqual(got[(TOPIC, 1)][1], UNSTABLE_OFFSET_COMMIT)
        error, got = self.conn.offset_fetch(group, [(TOPIC, 0), (TOPIC, 1)], False)
        self.assertEqual(got, {(TOPIC, 0): (-1, NONE), (TOPIC, 1): (-1, NONE)})


class TxnOffsetsRestartTest(unittest.TestCase):
    """Pending offsets are rebuilt from the transactional batch in __consumer_offsets."""

    def test_pending_offsets_survive_a_restart(self):
        target = RunnelTarget({"offsets.topic.num.partitions": "1"})
        try:
            target.create_topic(TOPIC, 2)
            conn = Conn(target.bootstrap)
            group = "txo-restart"
            wait_coordinator(conn, group)
            error, pid, epoch = conn.init_producer_id()
            self.assertEqual(error, NONE)
            self.assertEqual(conn.txn_offset_commit(group, pid, epoch, {(TOPIC, 0): 7}),
                             {(TOPIC, 0): NONE})
            conn.close()

            target.node.stop()
            target.node.start()
            conn = Conn(target.bootstrap)
            wait_coordinator(conn, group)
            _, got = conn.offset_fetch(group, [(TOPIC, 0)], True)
            self.assertEqual(got[(TOPIC, 0)][1], UNSTABLE_OFFSET_COMMIT)
            _, got = conn.offset_fetch(group, [(TOPIC, 0)], False)
            self.assertEqual(got, {(TOPIC, 0): (-1, NONE)})
            conn.close()
        finally:
            target.cleanup()


class TxnOffsetsCompletionTest(unittest.TestCase):
    """COMMIT and ABORT markers by hand (WriteTxnMarkers), then a restart."""

    def test_markers_end_the_transactions(self):
        target = RunnelTarget({"offsets.topic.num.partitions": "1"})
        try:
            target.create_topic(TOPIC, 2)
            conn = Conn(target.bootstrap)
            group = "txo-markers"
            wait_coordinator(conn, group)
            offsets_tp = ("__consumer_offsets", 0)
            error, committer, c_epoch = conn.init_producer_id()
            self.assertEqual(error, NONE)
            error, aborter, a_epoch = conn.init_producer_id()
            self.assertEqual(error, NONE)
            self.assertEqual(conn.txn_offset_commit(group, committer, c_epoch, {(TOPIC, 0): 10}),
                             {(TOPIC, 0): NONE})
            self.assertEqual(conn.txn_offset_commit(group, aborter, a_epoch, {(TOPIC, 1): 20}),
                             {(TOPIC, 1): NONE})
            self.assertEqual(conn.write_marker(committer, c_epoch, True, [offsets_tp]),
                             {offsets_tp: NONE})
            self.assertEqual(conn.write_marker(aborter, a_epoch, False, [offsets_tp]),
                             {offsets_tp: NONE})

            def settled():
                _, got = conn.offset_fetch(group, [(TOPIC, 0), (TOPIC, 1)], True)
                return got == {(TOPIC, 0): (10, NONE), (TOPIC, 1): (-1, NONE)}
            wait_until(settled, 10, "the markers applied", interval=0.1)
            conn.close()

            target.node.stop()
            target.node.start()
            conn = Conn(target.bootstrap)
            wait_coordinator(conn, group)
            _, got = conn.offset_fetch(group, [(TOPIC, 0), (TOPIC, 1)], True)
            self.assertEqual(got, {(TOPIC, 0): (10, NONE), (TOPIC, 1): (-1, NONE)})
            conn.close()
        finally:
            target.cleanup()


if __name__ == "__main__":
    unittest.main()
