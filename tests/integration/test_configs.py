"""Topic and broker configs, CreatePartitions and Metadata auto-creation through real clients
(confluent-kafka, kafka-python) and, where those clients lack an API (IncrementalAlterConfigs,
DescribeConfigs v3 documentation), raw requests. Only the retention test produces records,
to see a lowered retention.ms delete them."""
import os
import socket
import struct
import time
import unittest

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic as CNewTopic)
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType, NewPartitions as KNewPartitions
from kafka.errors import InvalidPartitionsError, UnknownTopicOrPartitionError

from harness import Node, read_response, send_request, wait_until
from kafka_wire import OFFSET_OUT_OF_RANGE, Connection, batch_headers, record_batch

# Every topic config with Apache Kafka's default (what a node without overrides describes).
TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "errors.deadletterqueue.group.enable": "false",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.decompressed.message.bytes": "2147483639",
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.copy.lag.bytes": "-1",
    "remote.copy.lag.ms": "0",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION = 40, 42, 3
INVALID_TIMESTAMP = 32


# ---- raw requests (non-flexible versions) -----------------------------------------------

def _str(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _nullable_str(s):
    return struct.pack(">h", -1) if s is None else _str(s)


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def _take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i8(self):
        return self._take(">b")

    def i16(self):
        return self._take(">h")

    def i32(self):
        return self._take(">i")

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s


def _call(port, api_key, version, body):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.settimeout(30)
        send_request(s, api_key, version, 11, body)
        corr, payload = read_response(s)
    assert corr == 11
    return _Reader(payload)


def incremental_alter(port, resources, validate_only=False):
    """IncrementalAlterConfigs v0: resources = [(type, name, [(key, op, value), ...])]; returns
    [(error_code, error_message, type, name)]."""
    body = struct.pack(">i", len(resources))
    for rtype, name, configs in resources:
        body += struct.pack(">b", rtype) + _str(name) + struct.pack(">i", len(configs))
        for key, op, value in configs:
            body += _str(key) + struct.pack(">b", op) + _nullable_str(value)
    body += struct.pack(">b", 1 if validate_only else 0)
    r = _call(port, 44, 0, body)
    r.i32()  # throttle
    return [(r.i16(), r.string(), r.i8(), r.string()) for _ in range(r.i32())]


def describe_v3(port, rtype, name, keys=None, synonyms=True, documentation=True):
    """DescribeConfigs v3 of one resource: (error_code, error_message, {name: entry})."""
    body = struct.pack(">i", 1) + struct.pack(">b", rtype) + _str(name)
    if keys is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(keys)) + b"".join(_str(k) for k in keys)
    body += struct.pack(">bb", 1 if synonyms else 0, 1 if documentation else 0)
    r = _call(port, 32, 3, body)
    r.i32()  # throttle
    assert r.i32() == 1
    error_code, error_message, _, _ = r.i16(), r.string(), r.i8(), r.string()
    configs = {}
    for _ in range(r.i32()):
        entry = {"name": r.string(), "value": r.string(), "read_only": r.i8() == 1,
                 "source": r.i8(), "sensitive": r.i8() == 1}
        entry["synonyms"] = [(r.string(), r.string(), r.i8()) for _ in range(r.i32())]
        entry["type"] = r.i8()
        entry["doc"] = r.string()
        configs[entry["name"]] = entry
    return error_code, error_message, configs


# ---- helpers over confluent-kafka -------------------------------------------------------

def describe(admin, rtype, name):
    """{name: ConfigEntry} of one resource through confluent-kafka."""
    futures = admin.describe_configs([ConfigResource(rtype, name)], request_timeout=20)
    (f,) = futures.values()
    return f.result(timeout=30)


def create(admin, *topics):
    for f in admin.create_topics(list(topics), request_timeout=20).values():
        f.result(timeout=30)


class TopicConfigsTest(unittest.TestCase):
    """One node whose file sets some node defaults, shared by the tests of this class."""

    @classmethod
    def setUpClass(cls):
        cls.node = Node(extra_config={"log.retention.hours": "2",
                                      "message.max.bytes": "2000000"}).start()
        cls.admin = AdminClient({"bootstrap.servers": cls.node.bootstrap})

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def test_describe_every_topic_config_with_its_source(self):
        create(self.admin, CNewTopic("described", 1, 1, config={"cleanup.policy": "compact"}))
        configs = describe(self.admin, ConfigResource.Type.TOPIC, "described")
        self.assertEqual(set(configs), set(TOPIC_DEFAULTS))
        expected = dict(TOPIC_DEFAULTS)
        expected.update({"cleanup.policy": "compact",        # set on the topic
                         "retention.ms": "7200000",          # log.retention.hours=2 in the file
                         "max.message.bytes": "2000000"})    # message.max.bytes in the file
        self.assertEqual({k: c.value for k, c in configs.items()}, expected)
        for name, c in configs.items():
            # retention.ms is DEFAULT_CONFIG although its value is log.retention.hours': as
            # Kafka 4.4 shows it (its synonyms start at log.retention.ms, set nowhere here).
            # min.insync.replicas=1 is the cluster-wide default a new cluster writes (Kafka's
            # format does the same).
            want = (ConfigSource.DYNAMIC_TOPIC_CONFIG if name == "cleanup.policy" else
                    ConfigSource.STATIC_BROKER_CONFIG if name == "max.message.bytes" else
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if name == "min.insync.replicas"
                    else ConfigSource.DEFAULT_CONFIG)
            self.assertEqual(c.source, want.value, name)
            self.assertFalse(c.is_read_only, name)
            self.assertFalse(c.is_sensitive, name)
        # Synonyms in Kafka's order, most specific first.
        self.assertEqual(list(configs["retention.ms"].synonyms.values()), [])
        synonyms = [(s.name, s.source) for s in configs["cleanup.policy"].synonyms.values()]
        self.assertEqual(synonyms, [("cleanup.policy", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
                                    ("log.cleanup.policy", ConfigSource.DEFAULT_CONFIG.value)])

    def test_describe_v3_types_documentation_and_key_filter(self):
        create(self.admin, CNewTopic("typed", 1, 1))
        err, msg, configs = describe_v3(self.node.port, TOPIC, "typed",
                                        keys=["retention.ms", "cleanup.policy", "no.such.key"])
        self.assertEqual((err, msg), (0, ""))  # Kafka 4.4: "", not null
        self.assertEqual(set(configs), {"retention.ms", "cleanup.policy"})
        self.assertEqual(configs["retention.ms"]["type"], 5)    # LONG
        self.assertEqual(configs["cleanup.policy"]["type"], 7)  # LIST
        self.assertTrue(configs["retention.ms"]["doc"])
        _, _, plain = describe_v3(self.node.port, TOPIC, "typed", synonyms=False,
                                  documentation=False)
        self.assertEqual(len(plain), len(TOPIC_DEFAULTS))
        self.assertIsNone(plain["retention.ms"]["doc"])
        self.assertEqual(plain["retention.ms"]["synonyms"], [])
        # Unknown and invalid topics.
        self.assertEqual(describe_v3(self.node.port, TOPIC, "never-made")[0],
                         UNKNOWN_TOPIC_OR_PARTITION)
        self.assertEqual(describe_v3(self.node.port, TOPIC, "bad name")[0], 17)
        with self.assertRaises(KafkaException) as ctx:
            describe(self.admin, ConfigResource.Type.TOPIC, "never-made")
        self.assertEqual(ctx.exception.args[0].name(), "UNKNOWN_TOPIC_OR_PART")

    def test_alter_retention_and_describe_it_back(self):
        create(self.admin, CNewTopic("altered", 1, 1, config={"segment.ms": "3600000"}))
        # confluent-kafka's alter_configs is Kafka's legacy AlterConfigs: the given configs
        # replace all of the topic's own ones.
        resource = ConfigResource(ConfigResource.Type.TOPIC, "altered",
                                  set_config={"retention.ms": "86400000"})
        for f in self.admin.alter_configs([resource], request_timeout=20).values():
            f.result(timeout=30)
        configs = describe(self.admin, ConfigResource.Type.TOPIC, "altered")
        self.assertEqual(configs["retention.ms"].value, "86400000")
        self.assertEqual(configs["retention.ms"].source, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        self.assertEqual(configs["segment.ms"].value, "604800000")
        self.assertEqual(configs["segment.ms"].source, ConfigSource.DEFAULT_CONFIG.value)

        # kafka-python, same API.
        admin = KafkaAdminClient(bootstrap_servers=self.node.bootstrap, request_timeout_ms=20000)
        try:
            resp = admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "altered",
                                                        configs={"retention.ms": "1000"})])
            self.assertEqual(resp.resources[0][0], 0, resp)
            resp = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "altered",
                                                           configs={"retention.ms": None})])
            entries = resp[0].resources[0][4]
            self.assertEqual([(e[0], e[1]) for e in entries], [("retention.ms", "1000")])
        finally:
            admin.close()

    def test_incremental_alter(self):
        create(self.admin, CNewTopic("incr", 1, 1, config={"segment.ms": "3600000"}))
        results = incremental_alter(self.node.port, [(TOPIC, "incr", [
            ("retention.ms", SET, "123456"), ("cleanup.policy", APPEND, "compact")])])
        self.assertEqual(results, [(0, None, TOPIC, "incr")])
        configs = describe(self.admin, ConfigResource.Type.TOPIC, "incr")
        self.assertEqual(configs["retention.ms"].value, "123456")
        self.assertEqual(configs["cleanup.policy"].value, "delete,compact")
        self.assertEqual(configs["segment.ms"].value, "3600000", "kept: not a full replace")

        results = incremental_alter(self.node.port, [(TOPIC, "incr", [
            ("retention.ms", DELETE, None), ("cleanup.policy", SUBTRACT, "delete")])])
        self.assertEqual(results[0][0], 0, results)
        configs = describe(self.admin, ConfigResource.Type.TOPIC, "incr")
        self.assertEqual(configs["retention.ms"].value, "7200000")  # back to the node's
        self.assertEqual(configs["retention.ms"].source, ConfigSource.DEFAULT_CONFIG.value)
        self.assertEqual(configs["cleanup.policy"].value, "compact")

        err, msg, _, _ = incremental_alter(self.node.port, [(TOPIC, "incr", [
            ("retention.ms", APPEND, "5")])])[0]
        self.assertEqual(err, INVALID_CONFIG)
        self.assertIn("retention.ms", msg)
        # validate_only changes nothing.
        results = incremental_alter(self.node.port, [(TOPIC, "incr", [
            ("retention.ms", SET, "1")])], validate_only=True)
        self.assertEqual(results[0][0], 0)
        self.assertEqual(describe(self.admin, ConfigResource.Type.TOPIC, "incr")[
            "retention.ms"].value, "7200000")

    def test_invalid_value_names_the_key(self):
        create(self.admin, CNewTopic("strict", 1, 1))
        resource = ConfigResource(ConfigResource.Type.TOPIC, "strict",
                                  set_config={"retention.ms": "soon"})
        futures = self.admin.alter_configs([resource], request_timeout=20)
        with self.assertRaises(KafkaException) as ctx:
            list(futures.values())[0].result(timeout=30)
        self.assertEqual(ctx.exception.args[0].name(), "INVALID_CONFIG")
        self.assertIn("retention.ms", ctx.exception.args[0].str())
        self.assertIn("soon", ctx.exception.args[0].str())
        err, msg, _, _ = incremental_alter(self.node.port, [(TOPIC, "strict", [
            ("no.such.config", SET, "1")])])[0]
        self.assertEqual((err, msg), (INVALID_CONFIG, "Unknown topic config name: no.such.config"))
        err, _, _, _ = incremental_alter(self.node.port, [(TOPIC, "gone", [
            ("retention.ms", SET, "1")])])[0]
        self.assertEqual(err, UNKNOWN_TOPIC_OR_PARTITION)
        self.assertEqual(describe(self.admin, ConfigResource.Type.TOPIC, "strict")[
            "retention.ms"].value, "7200000")

    def test_broker_configs(self):
        configs = describe(self.admin, ConfigResource.Type.BROKER, "1")
        self.assertEqual(configs["log.retention.hours"].value, "2")
        self.assertEqual(configs["log.retention.hours"].source,
                         ConfigSource.STATIC_BROKER_CONFIG.value)
        self.assertEqual(configs["num.partitions"].source, ConfigSource.DEFAULT_CONFIG.value)
        self.assertTrue(configs["log.dirs"].is_read_only)
        self.assertFalse(configs["log.retention.ms"].is_read_only)

        # A cluster-wide dynamic default reaches every topic without its own value.
        create(self.admin, CNewTopic("follows-broker", 1, 1))
        results = incremental_alter(self.node.port, [(BROKER, "", [
            ("log.segment.bytes", SET, "8388608")])])
        self.assertEqual(results[0][0], 0, results)
        topic = describe(self.admin, ConfigResource.Type.TOPIC, "follows-broker")
        self.assertEqual(topic["segment.bytes"].value, "8388608")
        self.assertEqual(topic["segment.bytes"].source,
                         ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        err, _, cluster = describe_v3(self.node.port, BROKER, "")
        self.assertEqual(err, 0)
        self.assertEqual(set(cluster), {"log.segment.bytes", "min.insync.replicas"})
        self.assertEqual(cluster["log.segment.bytes"]["source"],
                         ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        # This broker's own value wins over the cluster's.
        results = incremental_alter(self.node.port, [(BROKER, "1", [
            ("log.segment.bytes", SET, "4194304")])])
        self.assertEqual(results[0][0], 0, results)
        configs = describe(self.admin, ConfigResource.Type.BROKER, "1")
        self.assertEqual(configs["log.segment.bytes"].value, "4194304")
        self.assertEqual(configs["log.segment.bytes"].source,
                         ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        self.assertEqual(describe(self.admin, ConfigResource.Type.TOPIC, "follows-broker")[
            "segment.bytes"].value, "4194304")
        for rtype, name in ((BROKER, "1"), (BROKER, "")):
            incremental_alter(self.node.port, [(rtype, name, [
                ("log.segment.bytes", DELETE, None)])])

        # Kafka's answers for what cannot change at runtime, and for another broker.
        err, msg, _, _ = incremental_alter(self.node.port, [(BROKER, "", [
            ("log.dirs", SET, "/elsewhere")])])[0]
        self.assertEqual((err, msg),
                         (INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)"))
        err, msg, _, _ = incremental_alter(self.node.port, [(BROKER, "7", [
            ("log.retention.ms", SET, "1")])])[0]
        self.assertEqual((err, msg),
                         (INVALID_REQUEST, "Unexpected broker id, expected 1, but received 7"))
        err, msg, _ = describe_v3(self.node.port, BROKER, "7")
        self.assertEqual(err, INVALID_REQUEST)
        self.assertIn("expected 1 or empty string", msg)


class CreatePartitionsTest(unittest.TestCase):
    def setUp(self):
        self.node = Node().start()

    def tearDown(self):
        self.node.cleanup()

    def test_create_partitions_then_metadata_shows_them(self):
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        create(admin, CNewTopic("grow", 2, 1))
        for f in admin.create_partitions([NewPartitions("grow", 5)], request_timeout=20).values():
            f.result(timeout=30)
        # Answered once this broker's metadata has them: the very next Metadata shows them.
        self.assertEqual(len(admin.list_topics(topic="grow", timeout=10).topics["grow"].partitions),
                         5)
        futures = admin.create_partitions([NewPartitions("grow", 3)], request_timeout=20)
        with self.assertRaises(KafkaException) as ctx:
            list(futures.values())[0].result(timeout=30)
        self.assertEqual(ctx.exception.args[0].name(), "INVALID_PARTITIONS")
        self.assertIn("would not be an increase", ctx.exception.args[0].str())
        # Manual placement: honoured and checked.
        futures = admin.create_partitions([NewPartitions("grow", 6, [[1]])], request_timeout=20)
        list(futures.values())[0].result(timeout=30)
        futures = admin.create_partitions([NewPartitions("grow", 7, [[4]])], request_timeout=20)
        with self.assertRaises(KafkaException) as ctx:
            list(futures.values())[0].result(timeout=30)
        self.assertEqual(ctx.exception.args[0].name(), "INVALID_REPLICA_ASSIGNMENT")
        # validate_only changes nothing.
        futures = admin.create_partitions([NewPartitions("grow", 9)], validate_only=True,
                                          request_timeout=20)
        list(futures.values())[0].result(timeout=30)
        self.assertEqual(len(admin.list_topics(topic="grow", timeout=10).topics["grow"].partitions),
                         6)

        # kafka-python.
        kadmin = KafkaAdminClient(bootstrap_servers=self.node.bootstrap, request_timeout_ms=20000)
        try:
            kadmin.create_partitions({"grow": KNewPartitions(8)})
            with self.assertRaises(InvalidPartitionsError):
                kadmin.create_partitions({"grow": KNewPartitions(8)})
            with self.assertRaises(UnknownTopicOrPartitionError):
                kadmin.create_partitions({"not-there": KNewPartitions(2)})
        finally:
            kadmin.close()
        self.assertEqual(len(admin.list_topics(topic="grow", timeout=10).topics["grow"].partitions),
                         8)
        # They survive a restart.
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        self.assertEqual(len(admin.list_topics(topic="grow", timeout=10).topics["grow"].partitions),
                         8)


class AutoCreateTest(unittest.TestCase):
    def test_metadata_request_creates_the_topic(self):
        node = Node(extra_config={"num.partitions": "3"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            # confluent-kafka's list_topics(topic=...) asks with auto-creation allowed.
            admin.list_topics(topic="auto-confluent", timeout=10)

            def created(name):
                md = admin.list_topics(timeout=10)
                return name in md.topics and len(md.topics[name].partitions) == 3
            wait_until(lambda: created("auto-confluent"), 20, "auto-confluent created")

            # kafka-python's producer asks for its topic's metadata the same way, retrying
            # while the answer is LEADER_NOT_AVAILABLE (nothing is produced).
            producer = KafkaProducer(bootstrap_servers=node.bootstrap, max_block_ms=20000)
            try:
                self.assertEqual(producer.partitions_for("auto-kafka-python"), {0, 1, 2})
            finally:
                producer.close()
            self.assertTrue(created("auto-kafka-python"))

            # The coordinators' internal topics are theirs to create, not Metadata's.
            md = admin.list_topics(topic="__consumer_offsets", timeout=10)
            self.assertEqual(md.topics["__consumer_offsets"].error.name(),
                             "UNKNOWN_TOPIC_OR_PART")
            self.assertNotIn("__consumer_offsets", admin.list_topics(timeout=10).topics)
        finally:
            node.cleanup()

    def test_auto_create_disabled(self):
        node = Node(extra_config={"auto.create.topics.enable": "false"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            md = admin.list_topics(topic="not-auto", timeout=10)
            self.assertEqual(md.topics["not-auto"].error.name(), "UNKNOWN_TOPIC_OR_PART")
            self.assertNotIn("not-auto", admin.list_topics(timeout=10).topics)
        finally:
            node.cleanup()


if __name__ == "__main__":
    unittest.main()


class TopicConfigsTakeEffectTest(unittest.TestCase):
    """Topic configs reach storaged: a lowered retention.ms deletes records older than it at
    the next retention check (and nothing before the change); message.timestamp.type=
    LogAppendTime stamps records with the broker's time."""

    @classmethod
    def setUpClass(cls):
        cls.node = Node(extra_config={"log.retention.check.interval.ms": "100"}).start()
        cls.admin = AdminClient({"bootstrap.servers": cls.node.bootstrap})

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def test_lowered_retention_deletes_old_records(self):
        create(self.admin, CNewTopic("retained", 1, 1))
        producer = Producer({"bootstrap.servers": self.node.bootstrap, "linger.ms": 0})
        hour_ago = int(time.time() * 1000) - 3_600_000
        for i in range(10):
            producer.produce("retained", value=b"old-%d" % i, partition=0, timestamp=hour_ago + i)
        self.assertEqual(producer.flush(30), 0)
        consumer = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": "retained"})
        try:
            tp = TopicPartition("retained", 0)
            # Under the default retention (7 days) the hour-old records stay.
            time.sleep(0.5)
            self.assertEqual(consumer.get_watermark_offsets(tp, timeout=20), (0, 10))
            for f in self.admin.alter_configs(
                    [ConfigResource(ConfigResource.Type.TOPIC, "retained",
                                    set_config={"retention.ms": "60000"})],
                    request_timeout=20).values():
                f.result(timeout=30)
            # Everything has expired: the active segment is rolled and deleted, so the log
            # starts at its end.
            wait_until(lambda: consumer.get_watermark_offsets(tp, timeout=5) == (10, 10), 20,
                       "retention.ms=60000 deleting the hour-old records")
        finally:
            consumer.close()

    def test_fetches_of_the_latest_appends_follow_rolls_and_retention(self):
        # Fetches of records just produced are answered from where their appends' answers
        # said they lie (brokerd's tail), across segment rolls; once retention deletes those
        # segments the same offsets are out of range, and new appends are served again.
        create(self.admin, CNewTopic("rolling", 1, 1, config={"segment.bytes": "1500"}))
        hour_ago = int(time.time() * 1000) - 3_600_000
        produced = {}
        with Connection(self.node.bootstrap) as conn:
            def produce_and_fetch(i, timestamp):
                batch = record_batch([b"%03d" % i + bytes([i]) * 600], timestamp)
                answer = conn.produce(3, -1, "rolling", {0: batch})[("rolling", 0)]
                self.assertEqual(answer["error"], 0, answer)
                offset = answer["base_offset"]
                produced[offset] = batch
                # The record just produced, then everything from the first offset: whole
                # batches as produced, but for the offset and leader epoch the log sets.
                for start in (offset, min(produced)):
                    error, _, records = conn.fetch("rolling", 0, start)
                    self.assertEqual(error, 0)
                    headers = batch_headers(records)
                    self.assertEqual([h["base_offset"] for h in headers],
                                     list(range(start, offset + 1)))
                    pos = 0
                    for h in headers:
                        sent = produced[h["base_offset"]]
                        got = records[pos:pos + len(sent)]
                        self.assertEqual(got[16:], sent[16:])
                        pos += len(sent)
                return offset

            for i in range(12):
                self.assertEqual(produce_and_fetch(i, hour_ago + i), i)
            dirs = [d for d in os.listdir(os.path.join(self.node.dir, "logs"))
                    if d.startswith("rolling-")]
            self.assertEqual(len(dirs), 1)
            segments = [f for f in os.listdir(os.path.join(self.node.dir, "logs", dirs[0]))
                        if f.endswith(".log")]
            self.assertGreater(len(segments), 3, "segment.bytes=1500 rolls every two records")
            for f in self.admin.alter_configs(
                    [ConfigResource(ConfigResource.Type.TOPIC, "rolling",
                                    set_config={"retention.ms": "60000",
                                                "segment.bytes": "1500"})],
                    request_timeout=20).values():
                f.result(timeout=30)
            wait_until(lambda: conn.fetch("rolling", 0, 0)[0] == OFFSET_OUT_OF_RANGE, 20,
                       "retention.ms=60000 deleting the hour-old records")
            wait_until(lambda: conn.fetch("rolling", 0, 11)[0] == OFFSET_OUT_OF_RANGE, 20,
                       "retention deleting the last hour-old record")
            error, high_watermark, records = conn.fetch("rolling", 0, 12)
            self.assertEqual((error, high_watermark, records), (0, 12, b""))
            produced.clear()
            now = int(time.time() * 1000)
            for i in range(12, 15):
                self.assertEqual(produce_and_fetch(i, now), i)

    def test_future_timestamps_follow_message_timestamp_after_max_ms(self):
        # Kafka 4's default (KIP-1030) is an hour; a topic's own value replaces it.
        create(self.admin, CNewTopic("future-default", 1, 1),
               CNewTopic("future-day", 1, 1,
                         config={"message.timestamp.after.max.ms": "86400000"}))
        conn = Connection(self.node.bootstrap)
        try:
            now = int(time.time() * 1000)

            def produce(topic, timestamp):
                answer = conn.produce(3, -1, topic, {0: record_batch([b"x"], timestamp)})
                return answer[(topic, 0)]["error"]

            self.assertEqual(produce("future-default", now + 1_800_000), 0)
            self.assertEqual(produce("future-default", now + 7_200_000), INVALID_TIMESTAMP)
            self.assertEqual(produce("future-day", now + 7_200_000), 0)
            self.assertEqual(produce("future-day", now + 2 * 86_400_000), INVALID_TIMESTAMP)
        finally:
            conn.close()

    def test_log_append_time_topic_stamps_records(self):
        create(self.admin, CNewTopic("appendtime", 1, 1,
                                     config={"message.timestamp.type": "LogAppendTime"}))
        producer = Producer({"bootstrap.servers": self.node.bootstrap, "linger.ms": 0})
        before = int(time.time() * 1000)
        producer.produce("appendtime", value=b"x", partition=0, timestamp=before - 3_600_000)
        self.assertEqual(producer.flush(30), 0)
        after = int(time.time() * 1000)
        consumer = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": "appendtime",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("appendtime", 0, 0)])
            msg = None
            deadline = time.monotonic() + 30
            while msg is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error():
                    self.fail(str(msg.error()))
            self.assertIsNotNone(msg, "the record was not consumed")
            ts_type, ts = msg.timestamp()
            self.assertEqual(ts_type, 2)  # TIMESTAMP_LOG_APPEND_TIME
            self.assertGreaterEqual(ts, before - 1000)
            self.assertLessEqual(ts, after + 1000)
        finally:
            consumer.close()
