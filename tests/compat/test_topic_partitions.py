"""DescribeTopicPartitions (API 75, KIP-966) on the wire, against a node whose
max.request.partition.size.limit is 3: the paging, the cursor, unknown and invalid names and
the refused cursors, as Kafka 4.4's broker answers them. (kafka-topics --describe and the
Java Admin's describeTopics, which use the API, are in test_topics and test_java_client.)"""
import unittest

from peers import TargetTestCase, tool, wait_until  # puts tests/integration on the path
from kafka_wire import ApiWriter, Connection  # noqa: E402

DESCRIBE_TOPIC_PARTITIONS = 75
UNKNOWN_SERVER_ERROR, NONE, UNKNOWN_TOPIC_OR_PARTITION = -1, 0, 3
INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 17, 42
# Every operation of a topic (READ ... ALTER_CONFIGS): what a broker with no authorizer gives.
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
NO_OPERATIONS = -2**31  # the field's default: an answer refused as a whole
CAP = 3

# Topics of this class, created once: names sort as listed.
TOPICS = {"dtp-a": 4, "dtp-b": 2}


def describe(conn, names, limit=2000, cursor=None):
    """(topics, next_cursor) of a v0 answer; each topic a dict, each partition a dict."""
    w = ApiWriter(flexible=True)
    w.array(names, lambda w, n: w.string(n).tags())
    w.i32(limit)
    if cursor is None:
        w.i8(-1)
    else:
        w.i8(1).string(cursor[0]).i32(cursor[1]).tags()
    w.tags()
    r = conn.call(DESCRIBE_TOPIC_PARTITIONS, 0, w)
    r.i32()  # throttle time

    def nodes(r):
        return r.array(lambda r: r.i32())

    def partition(r):
        p = {"error": r.i16(), "index": r.i32(), "leader": r.i32(), "epoch": r.i32(),
             "replicas": nodes(r), "isr": nodes(r), "elr": nodes(r),
             "last_known_elr": nodes(r), "offline": nodes(r)}
        r.tags()
        return p

    def topic(r):
        t = {"error": r.i16(), "name": r.string(), "id": r.uuid(), "internal": r.i8() != 0,
             "partitions": r.array(partition), "operations": r.i32()}
        r.tags()
        return t

    topics = r.array(topic)
    next_cursor = None
    if r.i8() >= 0:
        next_cursor = (r.string(), r.i32())
        r.tags()
    r.tags()
    assert r.done(), "bytes left over in a DescribeTopicPartitions answer"
    return topics, next_cursor


def listed(topics):
    return [f"{t['name']}:{p['index']}" for t in topics for p in t["partitions"]]


class DescribeTopicPartitionsTest(TargetTestCase):
    runnel_config = {"max.request.partition.size.limit": str(CAP)}
    kafka_props = {"max.request.partition.size.limit": str(CAP)}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for name, partitions in TOPICS.items():
            tool("kafka-topics", "--bootstrap-server", cls.bootstrap, "--create", "--topic",
                 name, "--partitions", str(partitions), "--replication-factor", "1")
        cls.conn = Connection(cls.bootstrap)

        def all_known():
            topics, _ = describe(cls.conn, list(TOPICS))
            return all(t["error"] == NONE for t in topics)
        wait_until(all_known, 30, "the topics in the broker's metadata")

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        super().tearDownClass()

    def test_pages_follow_the_cursor_within_the_brokers_cap(self):
        names = ["dtp-b", "dtp-zz-missing", "dtp-a"]
        # The request asks for 10 a page; the broker's cap of 3 wins.
        topics, cursor = describe(self.conn, names, limit=10)
        self.assertEqual(listed(topics), ["dtp-a:0", "dtp-a:1", "dtp-a:2"])
        self.assertEqual(cursor, ("dtp-a", 3))
        # The page ends with dtp-b exactly: the cursor names the next topic, unknown or not.
        topics, cursor = describe(self.conn, names, limit=10, cursor=cursor)
        self.assertEqual(listed(topics), ["dtp-a:3", "dtp-b:0", "dtp-b:1"])
        self.assertEqual(cursor, ("dtp-zz-missing", 0))
        topics, cursor = describe(self.conn, names, limit=10, cursor=cursor)
        self.assertIsNone(cursor)
        self.assertEqual([(t["name"], t["error"], t["partitions"]) for t in topics],
                         [("dtp-zz-missing", UNKNOWN_TOPIC_OR_PARTITION, [])])
        self.assertEqual(topics[0]["id"], bytes(16))
        # A limit below the cap, and below 1 (taken as 1).
        topics, cursor = describe(self.conn, names, limit=0, cursor=("dtp-a", 1))
        self.assertEqual((listed(topics), cursor), (["dtp-a:1"], ("dtp-a", 2)))

    def test_every_field_of_a_partition(self):
        topics, cursor = describe(self.conn, ["dtp-b"])
        self.assertIsNone(cursor)
        (t,) = topics
        self.assertEqual((t["error"], t["name"], t["internal"], t["operations"]),
                         (NONE, "dtp-b", False, ALL_TOPIC_OPERATIONS))
        self.assertNotEqual(t["id"], bytes(16))
        self.assertEqual(len(t["partitions"]), 2)
        for i, p in enumerate(t["partitions"]):
            # No eligible leader replicas with one replica: empty lists, not null.
            self.assertEqual(p, {"error": NONE, "index": i, "leader": 1, "epoch": 0,
                                 "replicas": [1], "isr": [1], "elr": [],
                                 "last_known_elr": [], "offline": []})

    def test_unknown_and_invalid_names(self):
        topics, cursor = describe(self.conn, ["dtp-zz-nope", "bad name!", "dtp-b"])
        self.assertIsNone(cursor)
        got = [(t["name"], t["error"], t["internal"], t["operations"]) for t in topics]
        self.assertEqual(got, [("bad name!", INVALID_TOPIC_EXCEPTION, False, ALL_TOPIC_OPERATIONS),
                               ("dtp-b", NONE, False, ALL_TOPIC_OPERATIONS),
                               ("dtp-zz-nope", UNKNOWN_TOPIC_OR_PARTITION, False,
                                ALL_TOPIC_OPERATIONS)])
        topics, _ = describe(self.conn, ["__transaction_state"])
        self.assertEqual([(t["error"], t["internal"]) for t in topics],
                         [(UNKNOWN_TOPIC_OR_PARTITION, True)])

    def test_all_topics_from_a_cursor(self):
        # Every topic, from a cursor whose topic does not exist: the names after it.
        topics, cursor = describe(self.conn, [], cursor=("dtp-a0", 5))
        self.assertEqual(listed(topics), ["dtp-b:0", "dtp-b:1"])
        self.assertIsNone(cursor)
        topics, cursor = describe(self.conn, [], cursor=("dtp-a", 2))
        self.assertEqual(listed(topics), ["dtp-a:2", "dtp-a:3", "dtp-b:0"])
        self.assertEqual(cursor, ("dtp-b", 1))

    def test_refused_cursors(self):
        def refused(names, cursor):
            topics, next_cursor = describe(self.conn, names, cursor=cursor)
            self.assertIsNone(next_cursor)
            return [(t["name"], t["error"], t["partitions"], t["operations"]) for t in topics]

        def all_refused(names, error):
            """Kafka's answer to a request refused as a whole: each name as asked."""
            return [(n, error, [], NO_OPERATIONS) for n in names]

        # The cursor's topic must be among the named ones: every name refused.
        names = ["dtp-b", "dtp-a", "dtp-b"]
        self.assertEqual(refused(names, ("dtp-c", 0)), all_refused(names, INVALID_REQUEST))
        # A cursor before every name is not among them either.
        self.assertEqual(refused(["dtp-b"], ("dtp-a", 0)),
                         all_refused(["dtp-b"], INVALID_REQUEST))
        # A negative partition index.
        self.assertEqual(refused(["dtp-a"], ("dtp-a", -1)),
                         all_refused(["dtp-a"], INVALID_REQUEST))
        self.assertEqual(refused([], ("dtp-a", -1)), [])
        # An empty name with no cursor: Kafka's handler fails (a NullPointerException), and
        # every name gets UNKNOWN_SERVER_ERROR. With a cursor at "" it is an invalid name.
        self.assertEqual(refused(["", "dtp-a"], None),
                         all_refused(["", "dtp-a"], UNKNOWN_SERVER_ERROR))
        self.assertEqual(refused([""], ("", 0)),
                         [("", INVALID_TOPIC_EXCEPTION, [], ALL_TOPIC_OPERATIONS)])

if __name__ == "__main__":
    unittest.main()
