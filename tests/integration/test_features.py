"""UpdateFeatures (API 57) v0-v2 and Produce v13 on the wire, with hand-built requests
(kafka_wire.py). The node is created at transaction.version 0
(runnel.bootstrap.transaction.version=0).

UpdateFeatures, Kafka's rules (FeatureControlManager, QuorumController.updateFeatures):
- per feature an upgrade type: UPGRADE (1), SAFE_DOWNGRADE (2), UNSAFE_DOWNGRADE (3); v0 has
  AllowDowngrade instead (true: SAFE_DOWNGRADE);
- a level outside the supported range, an unknown feature, a downgrade asked as an upgrade or
  an "upgrade" asked as a downgrade: INVALID_UPDATE_VERSION (95) for the whole request, top
  level only, with Kafka's message; nothing written;
- ValidateOnly (v1+) checks and writes nothing; level 0 removes the feature;
- success: v0-v1 list every feature with NONE, v2 lists none; the next ApiVersions shows the
  new level under a larger FinalizedFeaturesEpoch.

Produce v13 names topics by id (KIP-516): an unknown id is UNKNOWN_TOPIC_ID (100), the answer
names the topic by id; otherwise it is v12.
"""
import unittest
import uuid

from harness import Node
from kafka_wire import PRODUCE, ApiReader, ApiWriter, Connection, record_batch, uvarint
from test_transactions import create_topic, transaction_version

METADATA = 3
UPDATE_FEATURES = 57
NONE = 0
INVALID_UPDATE_VERSION = 95
UNKNOWN_TOPIC_ID = 100
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
REFUSED = "The update failed for all features since the following feature had an error: "


def update_features(conn, version, updates, validate_only=False):
    """(error, message, [(feature, error, message)] or None) of UpdateFeatures; `updates`
    holds (feature, level, upgrade type), the type given as AllowDowngrade (type != UPGRADE)
    in v0."""
    w = ApiWriter(True).i32(10000)

    def update(w, u):
        name, level, upgrade_type = u
        w.string(name).i16(level)
        if version == 0:
            w.i8(1 if upgrade_type != UPGRADE else 0)
        else:
            w.i8(upgrade_type)
        w.tags()
    w.array(updates, update)
    if version >= 1:
        w.i8(1 if validate_only else 0)
    w.tags()
    r = conn.call(UPDATE_FEATURES, version, w)
    r.i32()  # throttle time
    error, message = r.i16(), r.string()
    results = None
    if version <= 1:
        results = r.array(lambda r: (r.string(), r.i16(), r.string(), r.tags())[:3])
    r.tags()
    assert r.done(), "bytes left over in the UpdateFeatures answer"
    return error, message, results


def topic_id(conn, name):
    """The topic's id, from Metadata v12."""
    w = ApiWriter(True)
    w.array([name], lambda w, n: w.uuid(bytes(16)).string(n).tags())
    w.i8(0).i8(0).tags()
    r = conn.call(METADATA, 12, w)
    r.i32()
    r.array(lambda r: (r.i32(), r.string(), r.i32(), r.string(), r.tags()))
    r.string()
    r.i32()

    def partition(r):
        r.take(">hiii")
        for _ in range(3):
            r.array(lambda r: r.i32())
        r.tags()

    topics = r.array(lambda r: (r.i16(), r.string(), r.uuid(), r.i8(), r.array(partition),
                                r.i32(), r.tags())[:3])
    assert topics[0][:2] == (NONE, name), topics
    return topics[0][2]


def produce(conn, version, topic, partition, batch):
    """[(topic name or id, partition, error, base offset)] of a Produce (acks -1) of one
    batch; from v13 `topic` is the id (16 bytes)."""
    w = ApiWriter(True).string(None).i16(-1).i32(10000)

    def records(w, b):
        w.buf += uvarint(len(b) + 1) + b

    def topic_data(w, t):
        if version >= 13:
            w.uuid(t)
        else:
            w.string(t)
        w.array([partition], lambda w, p: (w.i32(p), records(w, batch), w.tags())).tags()
    w.array([topic], topic_data)
    w.tags()
    r = conn.call(PRODUCE, version, w)
    out = []

    def part(r, t):
        index, error, base = r.i32(), r.i16(), r.i64()
        r.i64()  # log append time
        r.i64()  # log start offset
        r.array(lambda r: (r.i32(), r.string(), r.tags()))
        r.string()
        r.tags()
        out.append((t, index, error, base))

    def topic_response(r):
        t = r.uuid() if version >= 13 else r.string()
        r.array(lambda r: part(r, t))
        r.tags()
    r.array(topic_response)
    r.i32()
    r.tags()
    assert r.done(), "bytes left over in the Produce answer"
    return out


class FeaturesWireTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = Node({"runnel.bootstrap.transaction.version": "0"}).start()
        create_topic(cls.node.bootstrap, "by-id", 2)

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def setUp(self):
        self.conn = Connection(self.node.bootstrap)
        self.addCleanup(self.conn.close)

    def refused(self, version, updates, message):
        self.assertEqual(update_features(self.conn, version, updates),
                         (INVALID_UPDATE_VERSION, REFUSED + message, [] if version <= 1 else None))

    def test_update_features(self):
        supported, level, epoch0 = transaction_version(self.conn)
        self.assertEqual((supported, level), ((0, 2), None))

        # v1 ValidateOnly: checked, answered per feature, nothing written.
        self.assertEqual(
            update_features(self.conn, 1, [("transaction.version", 2, UPGRADE)], True),
            (NONE, None, [("transaction.version", NONE, "NONE")]))
        self.assertEqual(transaction_version(self.conn)[1:], (None, epoch0))

        # v2: top-level answer only; the next ApiVersions has the level and a new epoch.
        self.assertEqual(update_features(self.conn, 2, [("transaction.version", 2, UPGRADE)]),
                         (NONE, None, None))
        _, level, epoch2 = transaction_version(self.conn)
        self.assertEqual(level, 2)
        self.assertGreater(epoch2, epoch0)

        self.refused(1, [("transaction.version", 1, UPGRADE)],
                     "Invalid update version 1 for feature transaction.version. Can't downgrade "
                     "the version of this feature without setting the upgrade type to either "
                     "safe or unsafe downgrade.")
        self.refused(2, [("transaction.version", 3, UPGRADE)],
                     "Invalid update version 3 for feature transaction.version. Local controller "
                     "1 only supports versions 0-2")
        self.refused(2, [("transaction.version", 1, 7)],
                     "Invalid update version 1 for feature transaction.version. The controller "
                     "does not support the given upgrade type.")
        # One refused feature refuses the others of the request.
        self.refused(2, [("transaction.version", 1, SAFE_DOWNGRADE),
                         ("group.version", 1, UPGRADE)],
                     "Invalid update version 1 for feature group.version. Local controller 1 "
                     "does not support this feature.")
        self.refused(0, [("metadata.version", 1, UPGRADE)],
                     "Invalid update version 1 for feature metadata.version. Local controller 1 "
                     "does not support this feature.")
        self.assertEqual(transaction_version(self.conn)[1:], (2, epoch2))

        # v0's AllowDowngrade is a safe downgrade.
        self.assertEqual(
            update_features(self.conn, 0, [("transaction.version", 1, SAFE_DOWNGRADE)]),
            (NONE, None, [("transaction.version", NONE, "NONE")]))
        _, level, epoch1 = transaction_version(self.conn)
        self.assertEqual(level, 1)
        self.assertGreater(epoch1, epoch2)
        self.refused(2, [("transaction.version", 2, SAFE_DOWNGRADE)],
                     "Invalid update version 2 for feature transaction.version. Can't downgrade "
                     "to a newer version.")

        # Level 0 removes the feature: no finalized level in ApiVersions.
        self.assertEqual(
            update_features(self.conn, 2, [("transaction.version", 0, UNSAFE_DOWNGRADE)]),
            (NONE, None, None))
        _, level, epoch_off = transaction_version(self.conn)
        self.assertEqual(level, None)
        self.assertGreater(epoch_off, epoch1)

    def test_produce_v13_names_topics_by_id(self):
        tid = topic_id(self.conn, "by-id")
        batch = record_batch([b"a", b"b"], 1_700_000_000_000)
        first = produce(self.conn, 13, tid, 1, batch)
        self.assertEqual(first, [(tid, 1, NONE, first[0][3])])
        # The same partition by name (v12) goes on after it: one topic, one log.
        self.assertEqual(produce(self.conn, 12, "by-id", 1, batch),
                         [("by-id", 1, NONE, first[0][3] + 2)])
        unknown = uuid.uuid4().bytes
        self.assertEqual(produce(self.conn, 13, unknown, 0, batch),
                         [(unknown, 0, UNKNOWN_TOPIC_ID, -1)])
        self.assertEqual(produce(self.conn, 13, bytes(16), 0, batch),
                         [(bytes(16), 0, UNKNOWN_TOPIC_ID, -1)])
        # A known id, a partition it does not have.
        self.assertEqual(produce(self.conn, 13, tid, 5, batch), [(tid, 5, 3, -1)])


if __name__ == "__main__":
    unittest.main()
