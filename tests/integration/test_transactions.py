"""Transactions: the transaction coordinator (FindCoordinator key type 1, InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, __transaction_state) and what
consumers see of committed and aborted transactions.

The wire tests hand-build requests and check Kafka's answers: epochs bumped per
InitProducerId, fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH for old versions), unknown
partitions (UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED), EndTxn's state
rules, bad timeouts and ids; DescribeProducers lists a partition's producers as its leader
knows them (an idempotent one, an open transaction's first offset, the coordinator epoch of
a marker) and answers unknown or invalid topics and partitions with their errors, and a
partition led by another broker (a second, broker-only node) NOT_LEADER_OR_FOLLOWER.

The client tests use librdkafka: rdkafka_client.cc txn-produce (transactions committed and
aborted in turn) read back by read_committed and read_uncommitted consumers, and the Python
binding (confluent_kafka) for fencing by a second producer, the coordinator aborting a
transaction open past its timeout, and a transaction surviving a kill -9 of brokerd.
"""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BIN_DIR, Node, free_port, wait_until
from kafka_clients import read_seqs, seq_summary
from kafka_wire import ApiReader, ApiWriter, Connection, record_batch, uvarint

PRODUCE = 0
FIND_COORDINATOR = 10
API_VERSIONS = 18
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
INVALID_TOPIC_EXCEPTION = 17
NOT_LEADER_OR_FOLLOWER = 6
NOT_COORDINATOR = 16
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
OPERATION_NOT_ATTEMPTED = 55
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TRANSACTIONAL_ID_NOT_FOUND = 105
INVALID_REGULAR_EXPRESSION = 128
PRODUCER_FENCED = 90

KAFKA_PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                           "peers", "kafka")
PEERS_CACHE = os.environ.get("RUNNEL_PEERS_CACHE") or os.path.expanduser("~/.cache/runnel-peers")


def kafka_tool(test, *args):
    """Runs one of Apache Kafka's tools (scripts/peers/kafka tool); skips the test when the
    peers cache was never prepared (`make peers`), so CI does not download Kafka for it."""
    if not shutil.which("java") or not os.path.isdir(os.path.join(PEERS_CACHE, "m2")):
        test.skipTest("Apache Kafka's tools are not in the peers cache (make peers)")
    out = subprocess.run([KAFKA_PEERS, "tool", *args], capture_output=True, text=True,
                         timeout=180)
    test.assertEqual(out.returncode, 0, out.stdout + out.stderr)
    return out.stdout


NODE_CONFIG = {
    # Timed-out transactions are looked for every half second (Kafka: 10 s).
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def find_txn_coordinator(conn, txn_id):
    """(error, node id) of FindCoordinator v3 with key type 1."""
    w = ApiWriter(True).string(txn_id).i8(1).tags()
    r = conn.call(FIND_COORDINATOR, 3, w)
    r.i32()
    error = r.i16()
    r.string()
    node = r.i32()
    return error, node


def init_txn(conn, txn_id, version=4, producer_id=-1, epoch=-1, timeout_ms=60000):
    """(error, producer id, epoch) of InitProducerId (flexible versions)."""
    w = ApiWriter(True).string(txn_id).i32(timeout_ms)
    if version >= 3:
        w.i64(producer_id).i16(epoch)
    w.tags()
    r = conn.call(INIT_PRODUCER_ID, version, w)
    r.i32()
    return r.i16(), r.i64(), r.i16()


def add_partitions(conn, txn_id, producer_id, epoch, topics, version=3):
    """{(topic, partition): error} of AddPartitionsToTxn v0-v3. topics: {name: [partitions]}."""
    flexible = version >= 3
    w = ApiWriter(flexible).string(txn_id).i64(producer_id).i16(epoch)
    w.array(list(topics.items()), lambda w, t: w.string(t[0]).array(
        t[1], lambda w, p: w.i32(p)).tags())
    w.tags()
    if flexible:
        r = conn.call(ADD_PARTITIONS_TO_TXN, version, w)
    else:
        from kafka_wire import ApiReader
        r = ApiReader(conn.request(ADD_PARTITIONS_TO_TXN, version, w.buf))
    r.i32()
    out = {}

    def topic(r):
        name = r.string()

        def part(r):
            index = r.i32()
            out[(name, index)] = r.i16()
            r.tags()
        r.array(part)
        r.tags()
    r.array(topic)
    return out


def end_txn(conn, txn_id, producer_id, epoch, commit, version=3):
    flexible = version >= 3
    w = ApiWriter(flexible).string(txn_id).i64(producer_id).i16(epoch).i8(1 if commit else 0)
    w.tags()
    if flexible:
        r = conn.call(END_TXN, version, w)
    else:
        from kafka_wire import ApiReader
        r = ApiReader(conn.request(END_TXN, version, w.buf))
    r.i32()
    return r.i16()


def add_offsets(conn, txn_id, producer_id, epoch, group, version=3):
    w = ApiWriter(True).string(txn_id).i64(producer_id).i16(epoch).string(group).tags()
    r = conn.call(ADD_OFFSETS_TO_TXN, version, w)
    r.i32()
    return r.i16()


def describe_txns(conn, ids):
    """{id: (error, state, producer id, epoch, {topic: [partitions]})}."""
    r = conn.call(DESCRIBE_TRANSACTIONS, 0,
                  ApiWriter(True).array(ids, lambda w, i: w.string(i)).tags())
    r.i32()
    out = {}

    def state(r):
        error, txn_id, name = r.i16(), r.string(), r.string()
        r.i32()  # timeout
        r.i64()  # start time
        pid, epoch = r.i64(), r.i16()
        topics = {}

        def topic(r):
            name = r.string()
            topics[name] = r.array(lambda r: r.i32())
            r.tags()
        r.array(topic)
        r.tags()
        out[txn_id] = (error, name, pid, epoch, topics)
    r.array(state)
    return out


def describe_producers(conn, topics):
    """{(topic, partition): (error, [(producer id, epoch, last sequence, last timestamp,
    coordinator epoch, current transaction's first offset)])} of DescribeProducers v0.
    topics: {name: [partitions]}."""
    w = ApiWriter(True).array(list(topics.items()), lambda w, t: w.string(t[0]).array(
        t[1], lambda w, p: w.i32(p)).tags())
    r = conn.call(DESCRIBE_PRODUCERS, 0, w.tags())
    r.i32()
    out = {}

    def producer(r):
        got = (r.i64(), r.i32(), r.i32(), r.i64(), r.i32(), r.i64())
        r.tags()
        return got

    def topic(r):
        name = r.string()

        def part(r):
            index, error = r.i32(), r.i16()
            r.string()  # the error message
            producers = r.array(producer)
            r.tags()
            out[(name, index)] = (error, producers)
        r.array(part)
        r.tags()
    r.array(topic)
    r.tags()
    return out


def list_txns(conn, states=(), pattern=None):
    """(error, unknown state filters, {id: state}) of ListTransactions v2. While a
    __transaction_state partition is still loading the broker answers
    COORDINATOR_LOAD_IN_PROGRESS (as Kafka does, and its admin client retries): so does this,
    for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        got = list_txns_once(conn, states, pattern)
        if got[0] != COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def list_txns_once(conn, states, pattern):
    w = ApiWriter(True).array(list(states), lambda w, s: w.string(s))
    w.array([], lambda w, p: w.i64(p)).i64(-1).string(pattern).tags()
    r = conn.call(LIST_TRANSACTIONS, 2, w)
    r.i32()
    error = r.i16()
    unknown = r.array(lambda r: r.string())
    listed = {}

    def item(r):
        txn_id, _, state = r.string(), r.i64(), r.string()
        r.tags()
        listed[txn_id] = state
    r.array(item)
    return error, unknown, listed


def txn_offset_commit(conn, txn_id, group, producer_id, epoch, topic, partition, offset,
                      version=3):
    """The error of one partition's TxnOffsetCommit v3-v5 (no member: generation -1)."""
    w = ApiWriter(True).string(txn_id).string(group).i64(producer_id).i16(epoch)
    w.i32(-1).string("").string(None)
    w.array([topic], lambda w, t: w.string(t).array(
        [partition], lambda w, p: w.i32(p).i64(offset).i32(-1).string(None).tags()).tags())
    w.tags()
    r = conn.call(TXN_OFFSET_COMMIT, version, w)
    r.i32()
    errors = []
    r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), errors.append(r.i16()), r.tags())),
                       r.tags()))
    return errors[0]


def end_txn_v5(conn, txn_id, producer_id, epoch, commit):
    """(error, producer id, epoch) of EndTxn v5 (transaction.version 2)."""
    w = ApiWriter(True).string(txn_id).i64(producer_id).i16(epoch).i8(1 if commit else 0).tags()
    r = conn.call(END_TXN, 5, w)
    r.i32()
    return r.i16(), r.i64(), r.i16()


def produce_v12(conn, txn_id, topic, partition, batch):
    """(error, base offset) of a Produce v12 (acks -1) of one batch to one partition."""
    w = ApiWriter(True).string(txn_id).i16(-1).i32(10000)

    def records(w, b):
        w.buf += uvarint(len(b) + 1) + b
    w.array([topic], lambda w, t: w.string(t).array(
        [partition], lambda w, p: (w.i32(p), records(w, batch), w.tags())).tags())
    w.tags()
    r = conn.call(PRODUCE, 12, w)
    out = []

    def part(r):
        index, error, base = r.i32(), r.i16(), r.i64()
        r.i64()  # log append time
        r.i64()  # log start offset
        r.array(lambda r: (r.i32(), r.string(), r.tags()))
        r.string()
        r.tags()
        out.append((index, error, base))
    r.array(lambda r: (r.string(), r.array(part), r.tags()))
    return out[0][1:]


def transaction_version(conn):
    """(supported (min, max), finalized level or None, features epoch) of transaction.version
    in ApiVersions v3's tagged fields."""
    body = ApiWriter(True).string("runnel-test").string("1.0").tags()
    r = ApiReader(conn.request(API_VERSIONS, 3, body.buf, flexible=True), True)
    assert r.i16() == NONE
    r.array(lambda r: (r.i16(), r.i16(), r.i16(), r.tags()))
    r.i32()
    supported, finalized, epoch = None, None, -1
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.pos + size
        if tag == 0:
            for name, lo, hi in r.array(lambda r: (r.string(), r.i16(), r.i16(), r.tags())[:3]):
                if name == "transaction.version":
                    supported = (lo, hi)
        elif tag == 1:
            epoch = r.i64()
        elif tag == 2:
            for name, hi, lo in r.array(lambda r: (r.string(), r.i16(), r.i16(), r.tags())[:3]):
                if name == "transaction.version":
                    finalized = hi
        r.pos = end
    return supported, finalized, epoch


def create_topic(bootstrap, name, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=20)[name].result(30)
    wait_until(lambda: len(admin.list_topics(name, timeout=5).topics[name].partitions) ==
               partitions, 20, f"topic {name} in the metadata")


class TxnCoordinatorWireTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = Node(NODE_CONFIG).start()
        create_topic(cls.node.bootstrap, "wire", 2)
        create_topic(cls.node.bootstrap, "producers", 2)

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def connect(self, txn_id):
        conn = Connection(self.node.bootstrap)
        self.addCleanup(conn.sock.close)
        # The first FindCoordinator creates __transaction_state; until its shard is loaded
        # the answer may be a retriable error.
        wait_until(lambda: find_txn_coordinator(conn, txn_id) == (NONE, 1), 30,
                   "the transaction coordinator")
        return conn

    def test_epochs_fencing_and_the_end_of_a_transaction(self):
        conn = self.connect("wire-a")
        error, pid, epoch = init_txn(conn, "wire-a")
        self.assertEqual((error, epoch), (NONE, 0))
        # Another instance: the same id, the epoch bumped.
        self.assertEqual(init_txn(conn, "wire-a"), (NONE, pid, 1))
        # KIP-360: naming the current id and epoch bumps it; naming an old epoch is fenced.
        self.assertEqual(init_txn(conn, "wire-a", producer_id=pid, epoch=1), (NONE, pid, 2))
        self.assertEqual(init_txn(conn, "wire-a", producer_id=pid, epoch=0)[0], PRODUCER_FENCED)

        # Nothing to end yet.
        self.assertEqual(end_txn(conn, "wire-a", pid, 2, commit=True), INVALID_TXN_STATE)
        # An unknown partition: nothing is added, the rest not attempted.
        self.assertEqual(add_partitions(conn, "wire-a", pid, 2, {"wire": [0, 7], "nope": [0]}),
                         {("wire", 0): OPERATION_NOT_ATTEMPTED,
                          ("wire", 7): UNKNOWN_TOPIC_OR_PARTITION,
                          ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION})
        self.assertEqual(add_partitions(conn, "wire-a", pid, 2, {"wire": [0, 1]}),
                         {("wire", 0): NONE, ("wire", 1): NONE})
        self.assertEqual(add_offsets(conn, "wire-a", pid, 2, "some-group"), NONE)
        # Old epochs are fenced: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
        self.assertEqual(add_partitions(conn, "wire-a", pid, 1, {"wire": [0]}),
                         {("wire", 0): PRODUCER_FENCED})
        self.assertEqual(add_partitions(conn, "wire-a", pid, 1, {"wire": [0]}, version=1),
                         {("wire", 0): INVALID_PRODUCER_EPOCH})
        self.assertEqual(end_txn(conn, "wire-a", pid, 1, True, version=1), INVALID_PRODUCER_EPOCH)
        self.assertEqual(end_txn(conn, "wire-a", pid + 1, 2, True), INVALID_PRODUCER_ID_MAPPING)

        self.assertEqual(end_txn(conn, "wire-a", pid, 2, commit=True), NONE)
        # Once complete, a retry of the same end is NONE and the other one INVALID_TXN_STATE
        # (while the markers are written the client is told CONCURRENT_TRANSACTIONS).
        wait_until(lambda: end_txn(conn, "wire-a", pid, 2, commit=True) == NONE, 30,
                   "the commit completed")
        self.assertEqual(end_txn(conn, "wire-a", pid, 2, commit=False), INVALID_TXN_STATE)

        # A new transaction, aborted.
        self.assertEqual(add_partitions(conn, "wire-a", pid, 2, {"wire": [1]}),
                         {("wire", 1): NONE})
        self.assertEqual(end_txn(conn, "wire-a", pid, 2, commit=False), NONE)
        wait_until(lambda: end_txn(conn, "wire-a", pid, 2, commit=False) == NONE, 30,
                   "the abort completed")

    def test_describe_and_list(self):
        conn = self.connect("wire-c")
        _, pid, epoch = init_txn(conn, "wire-c")
        self.assertEqual(add_partitions(conn, "wire-c", pid, epoch, {"wire": [1, 0]}),
                         {("wire", 0): NONE, ("wire", 1): NONE})
        got = describe_txns(conn, ["wire-c", "never-seen-c"])
        self.assertEqual(got["wire-c"], (NONE, "Ongoing", pid, epoch, {"wire": [0, 1]}))
        self.assertEqual(got["never-seen-c"][0], TRANSACTIONAL_ID_NOT_FOUND)
        error, unknown, listed = list_txns(conn, ["Ongoing", "Bogus"], pattern="wire-[c]")
        self.assertEqual((error, unknown, listed), (NONE, ["Bogus"], {"wire-c": "Ongoing"}))
        self.assertEqual(list_txns(conn, ["CompleteAbort"], pattern="wire-c")[2], {})
        self.assertEqual(list_txns(conn, pattern="(")[0], INVALID_REGULAR_EXPRESSION)
        self.assertEqual(end_txn(conn, "wire-c", pid, epoch, commit=False), NONE)
        wait_until(lambda: list_txns(conn, pattern="wire-c")[2] == {"wire-c": "CompleteAbort"},
                   30, "the abort completed")

    def test_transaction_version_2_bumps_the_epoch_at_every_end(self):
        conn = self.connect("wire-v2")
        # A new cluster runs transaction.version 2, as Kafka 4's; the Java producer reads it here.
        supported, finalized, features_epoch = transaction_version(conn)
        self.assertEqual((supported, finalized), ((0, 2), 2))
        self.assertGreaterEqual(features_epoch, 0)
        _, pid, epoch = init_txn(conn, "wire-v2")

        def batch(seq, producer_epoch):
            return record_batch([b"v2"], 1_700_000_000_000, attributes=0x10, producer_id=pid,
                                producer_epoch=producer_epoch, base_sequence=seq)

        # Produce v12 adds the partition itself (no AddPartitionsToTxn), TxnOffsetCommit v5
        # the group's (no AddOffsetsToTxn).
        self.assertEqual(produce_v12(conn, "wire-v2", "wire", 0, batch(0, epoch))[0], NONE)
        conn.call(FIND_COORDINATOR, 3, ApiWriter(True).string("g-v2").i8(0).tags())
        committed = []
        wait_until(lambda: committed.append(txn_offset_commit(
            conn, "wire-v2", "g-v2", pid, epoch, "wire", 0, 1, version=5)) or committed[-1] not in
            (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR), 30, "the group coordinator")
        self.assertEqual(committed[-1], NONE)
        state = describe_txns(conn, ["wire-v2"])["wire-v2"]
        self.assertEqual(state[1], "Ongoing")
        self.assertEqual(state[4]["wire"], [0])
        self.assertIn("__consumer_offsets", state[4])

        # EndTxn v5 answers the next epoch; the markers carry it.
        self.assertEqual(end_txn_v5(conn, "wire-v2", pid, epoch, True), (NONE, pid, epoch + 1))
        wait_until(lambda: describe_txns(conn, ["wire-v2"])["wire-v2"][1] == "CompleteCommit",
                   30, "the commit completed")
        # A retry of it (its answer lost) gets the same; the old epoch is fenced from now on.
        self.assertEqual(end_txn_v5(conn, "wire-v2", pid, epoch, True), (NONE, pid, epoch + 1))
        self.assertEqual(produce_v12(conn, "wire-v2", "wire", 0, batch(1, epoch))[0],
                         INVALID_PRODUCER_EPOCH)
        # The next transaction at the new epoch starts its sequences at 0, on another partition.
        self.assertEqual(produce_v12(conn, "wire-v2", "wire", 1, batch(0, epoch + 1))[0], NONE)
        self.assertEqual(end_txn_v5(conn, "wire-v2", pid, epoch + 1, False),
                         (NONE, pid, epoch + 2))
        wait_until(lambda: describe_txns(conn, ["wire-v2"])["wire-v2"][1] == "CompleteAbort",
                   30, "the abort completed")
        # An abort with nothing produced still ends a transaction and bumps; a commit is refused.
        self.assertEqual(end_txn_v5(conn, "wire-v2", pid, epoch + 2, True)[0], INVALID_TXN_STATE)
        self.assertEqual(end_txn_v5(conn, "wire-v2", pid, epoch + 2, False),
                         (NONE, pid, epoch + 3))
        wait_until(lambda: describe_txns(conn, ["wire-v2"])["wire-v2"][1] == "CompleteAbort",
                   30, "the empty abort completed")
        # Partition 0 again, after its COMMIT marker at epoch + 1: the new epoch starts at 0.
        self.assertEqual(produce_v12(conn, "wire-v2", "wire", 0, batch(0, epoch + 3))[0], NONE)
        self.assertEqual(end_txn_v5(conn, "wire-v2", pid, epoch + 3, True),
                         (NONE, pid, epoch + 4))
    def test_describe_producers(self):
        conn = self.connect("wire-p")
        ts = 1_700_000_000_000
        # An idempotent producer (no transactional id): offsets 0-2, sequences 0-2.
        error, idem, _ = init_txn(conn, None)
        self.assertEqual(error, NONE)
        got = conn.produce(8, -1, "producers", {0: record_batch(
            [b"a", b"b", b"c"], ts, producer_id=idem, producer_epoch=0, base_sequence=0)})
        self.assertEqual(got[("producers", 0)]["error"], NONE)
        # A transactional one, its transaction open from offset 3.
        _, pid, epoch = init_txn(conn, "wire-p")
        self.assertEqual(add_partitions(conn, "wire-p", pid, epoch, {"producers": [0]}),
                         {("producers", 0): NONE})
        got = conn.produce(8, -1, "producers", {0: record_batch(
            [b"t"], ts + 5, attributes=0x10, producer_id=pid, producer_epoch=epoch,
            base_sequence=0)}, transactional_id="wire-p")
        self.assertEqual(got[("producers", 0)]["error"], NONE)

        got = describe_producers(conn, {"producers": [0, 1, 9], "no-such-topic": [0],
                                        "bad/name": [0]})
        error, listed = got[("producers", 0)]
        self.assertEqual(error, NONE)
        self.assertEqual(sorted(listed), sorted([(idem, 0, 2, ts, -1, -1),
                                                 (pid, epoch, 0, ts + 5, -1, 3)]))
        self.assertEqual(got[("producers", 1)], (NONE, []))
        # One bad partition fails only itself.
        self.assertEqual(got[("producers", 9)], (UNKNOWN_TOPIC_OR_PARTITION, []))
        self.assertEqual(got[("no-such-topic", 0)], (UNKNOWN_TOPIC_OR_PARTITION, []))
        self.assertEqual(got[("bad/name", 0)], (INVALID_TOPIC_EXCEPTION, []))

        # The commit's marker ends the transaction and leaves its coordinator epoch.
        self.assertEqual(end_txn(conn, "wire-p", pid, epoch, commit=True), NONE)
        wait_until(lambda: end_txn(conn, "wire-p", pid, epoch, commit=True) == NONE, 30,
                   "the commit completed")
        error, listed = describe_producers(conn, {"producers": [0]})[("producers", 0)]
        self.assertEqual(error, NONE)
        txn = [p for p in listed if p[0] == pid]
        self.assertEqual(len(txn), 1, listed)
        self.assertEqual((txn[0][1], txn[0][2], txn[0][5]), (epoch, 0, -1))
        self.assertGreaterEqual(txn[0][4], 0)

    def test_kafka_transactions_describe_producers(self):
        conn = self.connect("wire-q")
        _, pid, epoch = init_txn(conn, "wire-q")
        self.assertEqual(add_partitions(conn, "wire-q", pid, epoch, {"producers": [1]}),
                         {("producers", 1): NONE})
        got = conn.produce(8, -1, "producers", {1: record_batch(
            [b"q", b"r"], 1_700_000_000_000, attributes=0x10, producer_id=pid,
            producer_epoch=epoch, base_sequence=0)}, transactional_id="wire-q")
        self.assertEqual(got[("producers", 1)]["error"], NONE)
        described = kafka_tool(self, "kafka-transactions", "--bootstrap-server",
                               self.node.bootstrap, "describe-producers", "--topic", "producers",
                               "--partition", "1")
        # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
        # CurrentTransactionStartOffset: the open transaction starts at offset 0.
        lines = [l.split() for l in described.splitlines() if l.split()[:1] == [str(pid)]]
        self.assertEqual(len(lines), 1, described)
        self.assertEqual(lines[0][1], str(epoch), described)
        self.assertEqual(lines[0][3], "1", described)
        self.assertEqual(lines[0][-1], "0", described)
        self.assertEqual(end_txn(conn, "wire-q", pid, epoch, commit=False), NONE)

    def test_produce_checks_the_transaction(self):
        conn = self.connect("wire-d")
        _, pid, epoch = init_txn(conn, "wire-d")
        self.assertEqual(add_partitions(conn, "wire-d", pid, epoch, {"wire": [0]}),
                         {("wire", 0): NONE})

        def batch(seq, producer_epoch=epoch):
            return record_batch([b"v"], 1_700_000_000_000, attributes=0x10, producer_id=pid,
                                producer_epoch=producer_epoch, base_sequence=seq)

        # In the transaction: appended.
        got = conn.produce(8, -1, "wire", {0: batch(0)}, transactional_id="wire-d")
        self.assertEqual(got[("wire", 0)]["error"], NONE)
        # A partition not added (KIP-890): refused before it is appended.
        got = conn.produce(8, -1, "wire", {1: batch(0)}, transactional_id="wire-d")
        self.assertEqual(got[("wire", 1)]["error"], INVALID_TXN_STATE)
        # An older epoch.
        got = conn.produce(8, -1, "wire", {0: batch(1, epoch - 1)}, transactional_id="wire-d")
        self.assertEqual(got[("wire", 0)]["error"], INVALID_PRODUCER_EPOCH)
        # A transactional batch without the request's transactional id.
        got = conn.produce(8, -1, "wire", {0: batch(1)})
        self.assertEqual(got[("wire", 0)]["error"], TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        self.assertEqual(end_txn(conn, "wire-d", pid, epoch, commit=True), NONE)
        # After the commit, a late batch of that transaction cannot land after its marker.
        wait_until(lambda: end_txn(conn, "wire-d", pid, epoch, commit=True) == NONE, 30,
                   "the commit completed")
        got = conn.produce(8, -1, "wire", {0: batch(1)}, transactional_id="wire-d")
        self.assertEqual(got[("wire", 0)]["error"], INVALID_TXN_STATE)

    def test_kafka_transactions_list_and_describe(self):
        conn = self.connect("wire-e")
        _, pid, epoch = init_txn(conn, "wire-e")
        self.assertEqual(add_partitions(conn, "wire-e", pid, epoch, {"wire": [1]}),
                         {("wire", 1): NONE})
        listed = kafka_tool(self, "kafka-transactions", "--bootstrap-server", self.node.bootstrap,
                            "list")
        line = [l.split() for l in listed.splitlines() if "wire-e" in l]
        self.assertEqual(len(line), 1, listed)
        self.assertIn(str(pid), line[0])
        self.assertIn("Ongoing", line[0])
        described = kafka_tool(self, "kafka-transactions", "--bootstrap-server",
                               self.node.bootstrap, "describe", "--transactional-id", "wire-e")
        self.assertIn("Ongoing", described)
        self.assertIn("wire-1", described)
        self.assertEqual(end_txn(conn, "wire-e", pid, epoch, commit=False), NONE)

    def test_txn_offset_commit_needs_add_offsets(self):
        conn = self.connect("wire-f")
        # The group's coordinator first (it creates __consumer_offsets).
        conn.call(FIND_COORDINATOR, 3, ApiWriter(True).string("g-f").i8(0).tags())
        _, pid, epoch = init_txn(conn, "wire-f")
        self.assertEqual(add_partitions(conn, "wire-f", pid, epoch, {"wire": [0]}),
                         {("wire", 0): NONE})
        # KIP-890: the group's partition is not in the transaction yet.
        wait_until(lambda: txn_offset_commit(conn, "wire-f", "g-f", pid, epoch, "wire", 0, 5)
                   == INVALID_TXN_STATE, 30, "the group's coordinator loaded")
        self.assertEqual(add_offsets(conn, "wire-f", pid, epoch, "g-f"), NONE)
        self.assertEqual(txn_offset_commit(conn, "wire-f", "g-f", pid, epoch, "wire", 0, 5), NONE)
        self.assertEqual(end_txn(conn, "wire-f", pid, epoch, commit=False), NONE)

    def test_bad_requests(self):
        conn = self.connect("wire-b")
        self.assertEqual(init_txn(conn, "wire-b", timeout_ms=0), (INVALID_TRANSACTION_TIMEOUT, -1, -1))
        self.assertEqual(init_txn(conn, "wire-b", timeout_ms=900001),
                         (INVALID_TRANSACTION_TIMEOUT, -1, -1))
        self.assertEqual(init_txn(conn, ""), (INVALID_REQUEST, -1, -1))
        self.assertEqual(end_txn(conn, "", 1, 0, True), INVALID_REQUEST)
        self.assertEqual(end_txn(conn, "never-seen", 1, 0, True), INVALID_PRODUCER_ID_MAPPING)
        self.assertEqual(add_partitions(conn, "never-seen", 1, 0, {"wire": [0]}),
                         {("wire", 0): INVALID_PRODUCER_ID_MAPPING})


class DescribeProducersElsewhereTest(unittest.TestCase):
    """DescribeProducers asked of a broker that does not lead the partition: node 1 (broker
    and the one voter) and node 2 (a broker only) share a topic's partitions."""

    def setUp(self):
        common = {"controller.quorum.voters": f"1@127.0.0.1:{free_port()}"}
        self.nodes = [Node(common, node_id=1), Node({**common, "process.roles": "broker"},
                                                    node_id=2)]
        for n in self.nodes:
            self.addCleanup(n.cleanup)
            n.start(wait=False)
        for n in self.nodes:
            n.wait_ready(timeout=60)

    def test_a_partition_led_elsewhere_is_not_leader_or_follower(self):
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.nodes[0].bootstrap})
        wait_until(lambda: set(admin.list_topics(timeout=5).brokers) == {1, 2}, 30,
                   "both brokers registered")
        create_topic(self.nodes[0].bootstrap, "spread", 4)
        leaders = {p: m.leader for p, m in
                   admin.list_topics("spread", timeout=5).topics["spread"].partitions.items()}
        self.assertEqual(set(leaders.values()), {1, 2}, leaders)
        conn = Connection(self.nodes[0].bootstrap)
        self.addCleanup(conn.sock.close)
        got = describe_producers(conn, {"spread": sorted(leaders)})
        self.assertEqual(got, {("spread", p): (NONE if leader == 1 else NOT_LEADER_OR_FOLLOWER, [])
                               for p, leader in leaders.items()})


class TransactionalClientTest(unittest.TestCase):
    def setUp(self):
        self.node = Node(NODE_CONFIG).start()
        self.tmp = tempfile.mkdtemp(prefix="rnl-txn-", dir="/tmp")

    def tearDown(self):
        try:
            self.node.cleanup()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def client(self, *args, timeout=300):
        proc = subprocess.run([os.path.join(BIN_DIR, "rdkafka_client"), "c", *args],
                              capture_output=True, text=True, timeout=timeout)
        done = [line for line in proc.stdout.splitlines() if line.startswith("done ")]
        self.assertTrue(done, f"no summary (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return seq_summary(done[-1]), proc

    def producer(self, txn_id, **extra):
        from confluent_kafka import Producer
        conf = {"bootstrap.servers": self.node.bootstrap, "transactional.id": txn_id,
                "message.timeout.ms": 60000}
        conf.update(extra)
        return Producer(conf)

    def drain(self, topic, partitions, isolation):
        path = os.path.join(self.tmp, f"drain-{isolation}-{time.monotonic_ns()}")
        summary, proc = self.client("seq-drain", self.node.bootstrap, topic, str(partitions), path,
                                    f"isolation.level={isolation}", "test.timeout.ms=60000")
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        self.assertEqual(summary["corrupt"], 0)
        return list(read_seqs(path))

    def test_read_committed_sees_exactly_the_committed_transactions(self):
        topic, partitions = "txn", 3
        create_topic(self.node.bootstrap, topic, partitions)
        committed_path = os.path.join(self.tmp, "committed")
        summary, proc = self.client(
            "txn-produce", self.node.bootstrap, topic, str(partitions), "60", "50", "3",
            committed_path, "transactional.id=bulk", "test.timeout.ms=60000")
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        self.assertEqual((summary["committed"], summary["aborted"], summary["failed"]), (40, 20, 0))
        committed = sorted(read_seqs(committed_path))
        self.assertEqual(len(committed), 40 * 50)
        # read_committed: every committed record once, none of the aborted ones.
        self.assertEqual(sorted(self.drain(topic, partitions, "read_committed")), committed)
        # read_uncommitted: everything written, aborted transactions included.
        self.assertEqual(sorted(self.drain(topic, partitions, "read_uncommitted")),
                         list(range(60 * 50)))

    def test_a_second_instance_fences_the_first(self):
        from confluent_kafka import KafkaException
        create_topic(self.node.bootstrap, "fence", 1)
        first = self.producer("fenced")
        first.init_transactions(30)
        first.begin_transaction()
        first.produce("fence", b"\x00" * 8 + b"first", partition=0)
        first.flush(30)
        second = self.producer("fenced")
        second.init_transactions(30)  # aborts the first's transaction, bumping the epoch
        second.begin_transaction()
        second.produce("fence", (1).to_bytes(8, "big") + b"second", partition=0)
        second.commit_transaction(30)
        with self.assertRaises(KafkaException) as caught:
            first.commit_transaction(30)
        self.assertTrue(caught.exception.args[0].fatal(), caught.exception)
        values = self.read_values("fence", 1)
        self.assertEqual(values, [(1).to_bytes(8, "big") + b"second"])

    def read_values(self, topic, partitions):
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": f"r-{topic}",
                      "isolation.level": "read_committed", "enable.partition.eof": True,
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values, at_end = [], 0
        deadline = time.monotonic() + 30
        while at_end < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                at_end += 1
                continue
            values.append(m.value())
        c.close()
        self.assertEqual(at_end, partitions, "the consumer reached the end of every partition")
        return values

    def test_a_transaction_open_past_its_timeout_is_aborted(self):
        from confluent_kafka import KafkaException
        create_topic(self.node.bootstrap, "slow", 1)
        p = self.producer("slow", **{"transaction.timeout.ms": 1000, "message.timeout.ms": 1000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("slow", b"\x00" * 8 + b"late", partition=0)
        p.flush(30)
        time.sleep(3)  # the coordinator aborts it (checked every 500 ms)
        with self.assertRaises(KafkaException):
            p.commit_transaction(30)
        # The aborted record is never seen, and the partition is readable to its end.
        self.assertEqual(self.read_values("slow", 1), [])

    def test_an_open_transaction_commits_after_brokerd_is_killed(self):
        create_topic(self.node.bootstrap, "crash", 2)
        p = self.producer("crash")
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(10):
            p.produce("crash", i.to_bytes(8, "big"), partition=i % 2)
        p.flush(30)
        pid = self.node.kill_role("brokerd")
        self.node.wait_role_restarted("brokerd", pid)
        wait_until(self.node.kafka_ready, 60, "brokerd back")
        # The coordinator reloads the transaction from __transaction_state.
        p.commit_transaction(60)
        self.assertEqual(sorted(self.read_values("crash", 2)),
                         [i.to_bytes(8, "big") for i in range(10)])


if __name__ == "__main__":
    unittest.main()
