"""Offsets through real clients and hand-built requests: ListOffsets, DeleteRecords,
DescribeLogDirs and OffsetForLeaderEpoch, as a Kafka broker answers them.

- ListOffsets: confluent-kafka (librdkafka) get_watermark_offsets / offsets_for_times, and
  kafka-python's beginning_offsets / end_offsets / offsets_for_times; max timestamp (-3),
  earliest local (-4), versions 1-8 and the error cases by hand (no client here sends them).
- DeleteRecords: librdkafka's rd_kafka_DeleteRecords through ctypes (python3-confluent-kafka
  1.7 and kafka-python 2.0.2 have no delete_records), errors by hand.
- DescribeLogDirs and OffsetForLeaderEpoch: by hand (kafka-python 2.0.2 has no
  describe_log_dirs; librdkafka asks OffsetForLeaderEpoch only after a leader change, which
  a single node does not have).
"""
import ctypes
import os
import time
import unittest

from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from kafka_clients import ConfluentKafka, Rec, RunnelTarget
from kafka_wire import ApiWriter, Connection, batch_headers

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
UNKNOWN_LEADER_EPOCH = 75
FENCED_LEADER_EPOCH = 74

LIST_OFFSETS = 2
DELETE_RECORDS = 21
OFFSET_FOR_LEADER_EPOCH = 23
DESCRIBE_LOG_DIRS = 35

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5  # KIP-1005, v9+
EARLIEST_PENDING_UPLOAD = -6  # KIP-1023, v11+


# ---- the APIs under test, by hand ---------------------------------------------------------

class OffsetsConnection(Connection):
    def list_offsets(self, version, partitions, isolation_level=0, replica_id=-1,
                     timeout_ms=30000):
        """`partitions`: [(topic, partition, timestamp, current_leader_epoch)] in request order,
        one topic entry per item. Returns [(topic, partition, error, timestamp, offset,
        leader_epoch)] in answer order."""
        flex = version >= 6
        w = ApiWriter(flex).i32(replica_id)
        if version >= 2:
            w.i8(isolation_level)

        def topic(w, item):
            name, p, ts, epoch = item
            w.string(name)

            def part(w, _):
                w.i32(p)
                if version >= 4:
                    w.i32(epoch)
                w.i64(ts).tags()
            w.array([()], part).tags()
        w.array(partitions, topic)
        if version >= 10:
            w.i32(timeout_ms)
        w.tags()
        r = self.call(LIST_OFFSETS, version, w)
        if version >= 2:
            r.i32()  # throttle

        def read_topic(r):
            name = r.string()

            def read_part(r):
                p, err = r.i32(), r.i16()
                ts, off = r.i64(), r.i64()
                epoch = r.i32() if version >= 4 else None
                r.tags()
                return (name, p, err, ts, off, epoch)
            parts = r.array(read_part)
            r.tags()
            return parts
        out = [p for t in r.array(read_topic) for p in t]
        r.tags()
        assert r.done()
        return out

    def delete_records(self, version, partitions, timeout_ms=10000):
        """`partitions`: [(topic, partition, offset)]; returns [(topic, partition, low
        watermark, error)]."""
        flex = version >= 2
        w = ApiWriter(flex)

        def topic(w, item):
            name, p, off = item
            w.string(name)
            w.array([()], lambda w, _: w.i32(p).i64(off).tags()).tags()
        w.array(partitions, topic)
        w.i32(timeout_ms).tags()
        r = self.call(DELETE_RECORDS, version, w)
        r.i32()

        def read_topic(r):
            name = r.string()

            def read_part(r):
                item = (name, r.i32(), r.i64(), r.i16())
                r.tags()
                return item
            parts = r.array(read_part)
            r.tags()
            return parts
        out = [p for t in r.array(read_topic) for p in t]
        r.tags()
        assert r.done()
        return out

    def describe_log_dirs(self, version, topics):
        """`topics`: None (all) or {topic: [partitions]}. Returns (top-level error or None,
        [{error, dir, topics: {name: {partition: (size, lag, future)}}, total, usable}])."""
        flex = version >= 2
        w = ApiWriter(flex)
        items = None if topics is None else sorted(topics.items())

        def topic(w, item):
            w.string(item[0])
            w.array(item[1], lambda w, p: w.i32(p)).tags()
        w.array(items, topic)
        w.tags()
        r = self.call(DESCRIBE_LOG_DIRS, version, w)
        r.i32()
        top_error = r.i16() if version >= 3 else None

        def read_result(r):
            res = {"error": r.i16(), "dir": r.string()}

            def read_topic(r):
                name = r.string()

                def read_part(r):
                    item = (r.i32(), r.i64(), r.i64(), r.i8())
                    r.tags()
                    return item
                parts = r.array(read_part)
                r.tags()
                return name, {p: (size, lag, fut) for p, size, lag, fut in parts}
            res["topics"] = dict(r.array(read_topic))
            if version >= 4:
                res["total"], res["usable"] = r.i64(), r.i64()
            if version >= 5:
                res["cordoned"] = r.i8()
            r.tags()
            return res
        results = r.array(read_result)
        r.tags()
        assert r.done()
        return top_error, results

    def offset_for_leader_epoch(self, version, partitions, replica_id=-1):
        """`partitions`: [(topic, partition, current_leader_epoch, leader_epoch)]; returns
        [(topic, partition, error, leader_epoch, end_offset)]."""
        flex = version >= 4
        w = ApiWriter(flex)
        if version >= 3:
            w.i32(replica_id)

        def topic(w, item):
            name, p, current, epoch = item
            w.string(name)
            w.array([()], lambda w, _: w.i32(p).i32(current).i32(epoch).tags()).tags()
        w.array(partitions, topic)
        w.tags()
        r = self.call(OFFSET_FOR_LEADER_EPOCH, version, w)
        r.i32()

        def read_topic(r):
            name = r.string()

            def read_part(r):
                err, p, epoch, end = r.i16(), r.i32(), r.i32(), r.i64()
                r.tags()
                return (name, p, err, epoch, end)
            parts = r.array(read_part)
            r.tags()
            return parts
        out = [p for t in r.array(read_topic) for p in t]
        r.tags()
        assert r.done()
        return out


# ---- librdkafka's DeleteRecords through ctypes --------------------------------------------

class _TopicPartition(ctypes.Structure):
    _fields_ = [("topic", ctypes.c_char_p), ("partition", ctypes.c_int32),
                ("offset", ctypes.c_int64), ("metadata", ctypes.c_void_p),
                ("metadata_size", ctypes.c_size_t), ("opaque", ctypes.c_void_p),
                ("err", ctypes.c_int), ("_private", ctypes.c_void_p)]


class _TopicPartitionList(ctypes.Structure):
    _fields_ = [("cnt", ctypes.c_int), ("size", ctypes.c_int),
                ("elems", ctypes.POINTER(_TopicPartition))]


def rdkafka_delete_records(bootstrap, offsets, timeout_ms=20000):
    """librdkafka's rd_kafka_DeleteRecords: `offsets` {(topic, partition): offset}; returns
    {(topic, partition): (offset or low watermark, error code)}."""
    lib = ctypes.CDLL("librdkafka.so.1")
    vp = ctypes.c_void_p
    lib.rd_kafka_conf_new.restype = vp
    lib.rd_kafka_conf_set.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.restype = vp
    lib.rd_kafka_new.argtypes = [ctypes.c_int, vp, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_topic_partition_list_new.restype = ctypes.POINTER(_TopicPartitionList)
    lib.rd_kafka_topic_partition_list_add.restype = ctypes.POINTER(_TopicPartition)
    lib.rd_kafka_topic_partition_list_add.argtypes = [ctypes.POINTER(_TopicPartitionList),
                                                      ctypes.c_char_p, ctypes.c_int32]
    lib.rd_kafka_topic_partition_list_destroy.argtypes = [ctypes.POINTER(_TopicPartitionList)]
    lib.rd_kafka_DeleteRecords_new.restype = vp
    lib.rd_kafka_DeleteRecords_new.argtypes = [ctypes.POINTER(_TopicPartitionList)]
    lib.rd_kafka_DeleteRecords_destroy.argtypes = [vp]
    lib.rd_kafka_AdminOptions_new.restype = vp
    lib.rd_kafka_AdminOptions_new.argtypes = [vp, ctypes.c_int]
    lib.rd_kafka_AdminOptions_set_operation_timeout.argtypes = [vp, ctypes.c_int,
                                                               ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_AdminOptions_set_request_timeout.argtypes = [vp, ctypes.c_int,
                                                             ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_AdminOptions_destroy.argtypes = [vp]
    lib.rd_kafka_queue_new.restype = vp
    lib.rd_kafka_queue_new.argtypes = [vp]
    lib.rd_kafka_queue_destroy.argtypes = [vp]
    lib.rd_kafka_DeleteRecords.argtypes = [vp, ctypes.POINTER(vp), ctypes.c_size_t, vp, vp]
    lib.rd_kafka_queue_poll.restype = vp
    lib.rd_kafka_queue_poll.argtypes = [vp, ctypes.c_int]
    lib.rd_kafka_event_error.argtypes = [vp]
    lib.rd_kafka_event_error_string.restype = ctypes.c_char_p
    lib.rd_kafka_event_error_string.argtypes = [vp]
    lib.rd_kafka_event_DeleteRecords_result.restype = vp
    lib.rd_kafka_event_DeleteRecords_result.argtypes = [vp]
    lib.rd_kafka_DeleteRecords_result_offsets.restype = ctypes.POINTER(_TopicPartitionList)
    lib.rd_kafka_DeleteRecords_result_offsets.argtypes = [vp]
    lib.rd_kafka_event_destroy.argtypes = [vp]
    lib.rd_kafka_destroy.argtypes = [vp]

    err = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    if lib.rd_kafka_conf_set(conf, b"bootstrap.servers", bootstrap.encode(), err, 512) != 0:
        raise RuntimeError(err.value)
    rk = lib.rd_kafka_new(0, conf, err, 512)  # RD_KAFKA_PRODUCER
    if not rk:
        raise RuntimeError(err.value)
    q = lib.rd_kafka_queue_new(rk)
    opts = lib.rd_kafka_AdminOptions_new(rk, 6)  # RD_KAFKA_ADMIN_OP_DELETERECORDS
    lib.rd_kafka_AdminOptions_set_operation_timeout(opts, timeout_ms, err, 512)
    lib.rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms + 10000, err, 512)
    tpl = lib.rd_kafka_topic_partition_list_new(len(offsets))
    for (topic, partition), offset in offsets.items():
        lib.rd_kafka_topic_partition_list_add(tpl, topic.encode(), partition).contents.offset = \
            offset
    dr = lib.rd_kafka_DeleteRecords_new(tpl)
    lib.rd_kafka_topic_partition_list_destroy(tpl)
    drs = (vp * 1)(dr)
    ev = None
    try:
        lib.rd_kafka_DeleteRecords(rk, drs, 1, opts, q)
        ev = lib.rd_kafka_queue_poll(q, timeout_ms + 20000)
        if not ev:
            raise TimeoutError("rd_kafka_DeleteRecords did not answer")
        if lib.rd_kafka_event_error(ev) != 0:
            raise RuntimeError(f"DeleteRecords failed: {lib.rd_kafka_event_error_string(ev)}")
        res = lib.rd_kafka_event_DeleteRecords_result(ev)
        parts = lib.rd_kafka_DeleteRecords_result_offsets(res).contents
        return {(parts.elems[i].topic.decode(), parts.elems[i].partition):
                (parts.elems[i].offset, parts.elems[i].err) for i in range(parts.cnt)}
    finally:
        if ev:
            lib.rd_kafka_event_destroy(ev)
        lib.rd_kafka_DeleteRecords_destroy(dr)
        lib.rd_kafka_AdminOptions_destroy(opts)
        lib.rd_kafka_queue_destroy(q)
        lib.rd_kafka_destroy(rk)


# ---- the tests ----------------------------------------------------------------------------

class OffsetsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = RunnelTarget({"auto.create.topics.enable": "false"})
        cls.node = cls.target.node
        # Timestamps an hour back, well inside what the broker accepts.
        cls.base = int(time.time() * 1000) - 3600_000

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    def setUp(self):
        self.conn = OffsetsConnection(self.target.bootstrap)

    def tearDown(self):
        self.conn.close()

    def produce(self, topic, timestamps, partition=0):
        """One record per timestamp, in order, to one partition; returns their offsets."""
        records = [Rec(key=b"k%d" % i, value=b"v%d" % i, timestamp=ts, partition=partition)
                   for i, ts in enumerate(timestamps)]
        out = ConfluentKafka().produce(self.target.bootstrap, topic, records)
        self.assertTrue(all(d.error == "NO_ERROR" for d in out), out)
        return [d.offset for d in out]

    def leader_epoch(self, topic, partition=0):
        """The partition's current leader epoch, as ListOffsets v4 'latest' answers it."""
        [(_, _, err, _, _, epoch)] = self.conn.list_offsets(4, [(topic, partition, LATEST, -1)])
        self.assertEqual(err, NONE)
        return epoch

    def test_api_versions_advertise_what_is_served(self):
        v = self.conn.api_versions()
        self.assertEqual(v[LIST_OFFSETS], (1, 11))
        self.assertEqual(v[DELETE_RECORDS], (0, 2))
        self.assertEqual(v[DESCRIBE_LOG_DIRS], (1, 5))
        self.assertEqual(v[OFFSET_FOR_LEADER_EPOCH], (2, 4))
        # A version not advertised closes the connection, as Kafka does.
        with OffsetsConnection(self.target.bootstrap) as other, self.assertRaises(ConnectionError):
            other.list_offsets(0, [("any", 0, LATEST, -1)])

    def test_confluent_kafka_watermarks_and_offsets_for_times(self):
        self.target.create_topic("lo-ck", 2)
        b = self.base
        self.assertEqual(self.produce("lo-ck", [b, b + 10, b + 20, b + 30, b + 40]),
                         [0, 1, 2, 3, 4])
        c = Consumer({"bootstrap.servers": self.target.bootstrap, "group.id": "lo-ck",
                      "enable.auto.commit": False})
        try:
            self.assertEqual(c.get_watermark_offsets(TopicPartition("lo-ck", 0), timeout=20),
                             (0, 5))
            self.assertEqual(c.get_watermark_offsets(TopicPartition("lo-ck", 1), timeout=20),
                             (0, 0))
            asked = [TopicPartition("lo-ck", 0, b - 100), TopicPartition("lo-ck", 0, b + 15),
                     TopicPartition("lo-ck", 0, b + 40), TopicPartition("lo-ck", 0, b + 41),
                     TopicPartition("lo-ck", 1, b)]
            found = []
            for tp in asked:  # one partition per call: librdkafka merges duplicates
                [r] = c.offsets_for_times([tp], timeout=20)
                self.assertIsNone(r.error, r)
                found.append(r.offset)
            # No record at or after the timestamp: -1, which librdkafka reports as the end.
            self.assertEqual(found, [0, 2, 4, -1, -1])
        finally:
            c.close()

    def test_kafka_python_beginning_end_and_offsets_for_times(self):
        self.target.create_topic("lo-kp", 1)
        b = self.base
        self.produce("lo-kp", [b + 100, b + 200, b + 300])
        c = KafkaConsumer(bootstrap_servers=self.target.bootstrap, group_id=None,
                          enable_auto_commit=False, request_timeout_ms=30000)
        try:
            tp = KTopicPartition("lo-kp", 0)
            self.assertEqual(c.beginning_offsets([tp]), {tp: 0})
            self.assertEqual(c.end_offsets([tp]), {tp: 3})
            found = c.offsets_for_times({tp: b + 150})[tp]
            self.assertEqual((found.offset, found.timestamp), (1, b + 200))
            found = c.offsets_for_times({tp: b + 300})[tp]
            self.assertEqual((found.offset, found.timestamp), (2, b + 300))
            self.assertIsNone(c.offsets_for_times({tp: b + 301})[tp])
        finally:
            c.close()

    def test_list_offsets_every_version_and_special_timestamp(self):
        self.target.create_topic("lo-raw", 2)
        b = self.base
        # The maximum timestamp is in the middle of the batch.
        self.produce("lo-raw", [b, b + 500, b + 20, b + 30])
        epoch = self.leader_epoch("lo-raw")
        self.assertGreaterEqual(epoch, 0)
        for version in range(1, 12):
            with self.subTest(version=version):
                # timestamp asked -> (timestamp, offset) answered
                cases = {LATEST: (-1, 4), EARLIEST: (-1, 0), b + 10: (b + 500, 1),
                         b + 501: (-1, -1)}
                if version >= 7:
                    cases[MAX_TIMESTAMP] = (b + 500, 1)
                if version >= 8:
                    cases[EARLIEST_LOCAL] = (-1, 0)
                # Nothing is tiered: Kafka answers -1, -1 (leader epoch -1) for a topic
                # without remote storage.
                if version >= 9:
                    cases[LATEST_TIERED] = (-1, -1)
                if version >= 11:
                    cases[EARLIEST_PENDING_UPLOAD] = (-1, -1)
                for ts, (want_ts, want_offset) in cases.items():
                    # One partition once per request (a second copy would be refused), with
                    # the empty partition beside it.
                    got = self.conn.list_offsets(version, [("lo-raw", 0, ts, -1),
                                                           ("lo-raw", 1, ts, -1)])
                    # Leader epochs (v4+): the current one for "latest", else the found
                    # batch's or the epoch cache's; -1 when nothing is found.
                    epoch0 = epoch if want_offset >= 0 else -1
                    offset1 = 0 if ts in (LATEST, EARLIEST, EARLIEST_LOCAL) else -1
                    epoch1 = epoch if ts == LATEST else -1
                    if version < 4:
                        epoch0 = epoch1 = None
                    self.assertEqual(got, [("lo-raw", 0, NONE, want_ts, want_offset, epoch0),
                                           ("lo-raw", 1, NONE, -1, offset1, epoch1)],
                                     f"timestamp {ts}")
        # read_committed sees up to the last stable offset (= the high watermark here); a
        # debugging replica (-2) the log end offset: the same on one replica.
        self.assertEqual(self.conn.list_offsets(2, [("lo-raw", 0, LATEST, -1)],
                                                isolation_level=1),
                         [("lo-raw", 0, NONE, -1, 4, None)])
        self.assertEqual(self.conn.list_offsets(5, [("lo-raw", 0, LATEST, -1)], replica_id=-2),
                         [("lo-raw", 0, NONE, -1, 4, epoch)])

    def test_list_offsets_errors(self):
        self.target.create_topic("lo-err", 2)
        self.produce("lo-err", [self.base])
        epoch = self.leader_epoch("lo-err")
        got = self.conn.list_offsets(5, [
            ("nope", 0, LATEST, -1),
            ("lo-err", 7, LATEST, -1),
            ("lo-err", 0, LATEST, -1),
            ("lo-err", 1, LATEST, -1),
            ("lo-err", 0, EARLIEST, -1),
            ("lo-err", 1, LATEST, epoch + 1),
        ])
        # Each partition named twice: every copy is INVALID_REQUEST, whatever else it asks.
        self.assertEqual([(t, p, e) for t, p, e, _, _, _ in got], [
            ("nope", 0, UNKNOWN_TOPIC_OR_PARTITION), ("lo-err", 7, UNKNOWN_TOPIC_OR_PARTITION),
            ("lo-err", 0, INVALID_REQUEST), ("lo-err", 1, INVALID_REQUEST),
            ("lo-err", 0, INVALID_REQUEST), ("lo-err", 1, INVALID_REQUEST)])
        for _, _, _, ts, off, ep in got:
            self.assertEqual((ts, off, ep), (-1, -1, -1))

        got = self.conn.list_offsets(5, [("lo-err", 1, LATEST, epoch + 1)])
        self.assertEqual(got[0][2], UNKNOWN_LEADER_EPOCH)
        # Leader epochs stay 0 until leaders change (replication); -1 means "no check".
        if epoch > 0:
            got = self.conn.list_offsets(5, [("lo-err", 1, LATEST, epoch - 1)])
            self.assertEqual(got[0][2], FENCED_LEADER_EPOCH)
        got = self.conn.list_offsets(5, [("lo-err", 0, LATEST, epoch)])
        self.assertEqual(got, [("lo-err", 0, NONE, -1, 1, epoch)])

    def test_delete_records_through_librdkafka(self):
        self.target.create_topic("dr", 2)
        b = self.base
        self.produce("dr", [b + i for i in range(6)])
        self.produce("dr", [b, b + 1], partition=1)
        res = rdkafka_delete_records(self.target.bootstrap, {("dr", 0): 4, ("dr", 1): -1})
        self.assertEqual(res, {("dr", 0): (4, 0), ("dr", 1): (2, 0)})

        c = Consumer({"bootstrap.servers": self.target.bootstrap, "group.id": "dr",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            self.assertEqual(c.get_watermark_offsets(TopicPartition("dr", 0), timeout=20),
                             (4, 6))
            self.assertEqual(c.get_watermark_offsets(TopicPartition("dr", 1), timeout=20),
                             (2, 2))
            # A timestamp before what is left finds the first record left.
            [r] = c.offsets_for_times([TopicPartition("dr", 0, b)], timeout=20)
            self.assertEqual(r.offset, 4)
            c.assign([TopicPartition("dr", 0, 0)])
            first = None
            deadline = time.monotonic() + 30
            while first is None and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    first = m.offset()
            self.assertEqual(first, 4, "a consumer reset to the earliest starts at the new start")
        finally:
            c.close()

        # Past the high watermark: OFFSET_OUT_OF_RANGE, nothing moves.
        res = rdkafka_delete_records(self.target.bootstrap, {("dr", 0): 7})
        self.assertEqual(res[("dr", 0)][1], OFFSET_OUT_OF_RANGE)
        # Below the current start: nothing moves, the answer is the start.
        self.assertEqual(self.conn.delete_records(1, [("dr", 0, 2)]), [("dr", 0, 4, NONE)])

    def test_a_fetch_right_after_delete_records_gets_nothing_below_it(self):
        # Records produced through this broker are fetched from where the append answers
        # said they lie (brokerd's tail); DeleteRecords must end that before it is answered.
        self.target.create_topic("dr-tail", 1)
        b = self.base
        for round_ in range(5):
            start = round_ * 4
            offsets = self.produce("dr-tail", [b + i for i in range(4)])
            self.assertEqual(offsets, list(range(start, start + 4)))
            error, _, records = self.conn.fetch("dr-tail", 0, start)  # served, tail warm
            self.assertEqual((error, len(records) > 0), (NONE, True))
            self.assertEqual(self.conn.delete_records(1, [("dr-tail", 0, start + 3)]),
                             [("dr-tail", 0, start + 3, NONE)])
            error, _, records = self.conn.fetch("dr-tail", 0, start)
            self.assertEqual((error, records), (OFFSET_OUT_OF_RANGE, b""))
            error, _, records = self.conn.fetch("dr-tail", 0, start + 3)
            self.assertEqual(error, NONE)
            [h] = batch_headers(records)  # the batch holding the new start
            self.assertLessEqual(h["base_offset"], start + 3)
            self.assertEqual(h["base_offset"] + h["last_offset_delta"], start + 3)

    def test_delete_records_versions_and_errors(self):
        self.target.create_topic("dr-raw", 1)
        self.target.create_topic("dr-compact", 1, {"cleanup.policy": "compact"})
        self.produce("dr-raw", [self.base + i for i in range(5)])
        for version, offset in ((0, 1), (1, 2), (2, 3)):
            with self.subTest(version=version):
                self.assertEqual(self.conn.delete_records(version, [("dr-raw", 0, offset)]),
                                 [("dr-raw", 0, offset, NONE)])
        got = self.conn.delete_records(2, [("dr-raw", 0, 6), ("nope", 0, 1), ("dr-raw", 3, 1),
                                           ("dr-compact", 0, 0), ("dr-raw", 0, -1)])
        self.assertEqual(got, [("dr-raw", 0, -1, OFFSET_OUT_OF_RANGE),
                               ("nope", 0, -1, UNKNOWN_TOPIC_OR_PARTITION),
                               ("dr-raw", 3, -1, UNKNOWN_TOPIC_OR_PARTITION),
                               ("dr-compact", 0, -1, POLICY_VIOLATION),
                               ("dr-raw", 0, 5, NONE)])

    def log_files_size(self, topic, partition):
        path = os.path.join(self.node.dir, "logs", f"{topic}-{partition}")
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
                   if f.endswith(".log"))

    def test_describe_log_dirs(self):
        self.target.create_topic("ld-a", 2)
        self.target.create_topic("ld-b", 1)
        self.produce("ld-a", [self.base + i for i in range(10)])
        log_dir = os.path.realpath(os.path.join(self.node.dir, "logs"))
        size_a0 = self.log_files_size("ld-a", 0)
        self.assertGreater(size_a0, 0)
        for version in range(1, 6):
            with self.subTest(version=version):
                top_error, results = self.conn.describe_log_dirs(version, None)
                self.assertEqual(top_error, 0 if version >= 3 else None)
                self.assertEqual(len(results), 1, results)
                r = results[0]
                self.assertEqual(r["error"], NONE)
                self.assertEqual(os.path.realpath(r["dir"]), log_dir)
                self.assertEqual(r["topics"]["ld-a"], {0: (size_a0, 0, 0), 1: (0, 0, 0)})
                self.assertEqual(r["topics"]["ld-b"], {0: (0, 0, 0)})
                if version >= 4:
                    self.assertGreater(r["total"], 0)
                    self.assertGreater(r["usable"], 0)
                    self.assertLessEqual(r["usable"], r["total"])
                if version >= 5:
                    self.assertEqual(r["cordoned"], 0, "no directory is cordoned")
        # Only the partitions asked (an unknown one is left out); none asked: the dir alone.
        _, results = self.conn.describe_log_dirs(4, {"ld-a": [1, 9], "nope": [0]})
        self.assertEqual(results[0]["topics"], {"ld-a": {1: (0, 0, 0)}})
        _, results = self.conn.describe_log_dirs(2, {})
        self.assertEqual([(r["dir"], r["topics"]) for r in results], [(results[0]["dir"], {})])

    def test_offset_for_leader_epoch(self):
        self.target.create_topic("ole", 2)
        self.produce("ole", [self.base + i for i in range(7)])
        epoch = self.leader_epoch("ole")
        for version in (2, 3, 4):
            with self.subTest(version=version):
                got = self.conn.offset_for_leader_epoch(version, [
                    ("ole", 0, -1, epoch),          # the latest epoch ends at the log end
                    ("ole", 0, epoch, epoch + 3),   # above every epoch known: undefined
                    ("ole", 1, -1, epoch),          # an empty log knows no epoch
                    ("nope", 0, -1, 0),
                    ("ole", 5, -1, 0),
                    ("ole", 0, epoch + 1, epoch),   # a newer leader than this one
                ])
                self.assertEqual(got, [
                    ("ole", 0, NONE, epoch, 7),
                    ("ole", 0, NONE, -1, -1),
                    ("ole", 1, NONE, -1, -1),
                    ("nope", 0, UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
                    ("ole", 5, UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
                    ("ole", 0, UNKNOWN_LEADER_EPOCH, -1, -1),
                ])
        if epoch > 0:  # leader epochs stay 0 until leaders change (replication)
            got = self.conn.offset_for_leader_epoch(4, [("ole", 0, epoch - 1, epoch),
                                                        ("ole", 0, -1, epoch - 1)])
            # A fenced client; and an epoch before every known one ends where the first starts.
            self.assertEqual(got, [("ole", 0, FENCED_LEADER_EPOCH, -1, -1),
                                   ("ole", 0, NONE, epoch - 1, 0)])


if __name__ == "__main__":
    unittest.main()
