"""Every common Kafka client produces to a node and reads back what it produced.

Clients: kcat, librdkafka's C and C++ APIs (rdkafka_client.cc), python3-confluent-kafka,
python3-kafka and KafkaJS. Each sends keyed records left to its partitioner, null keys, an
empty key, empty and null values, headers (a repeated name and an empty value among them),
CreateTime timestamps it sets itself, and a 1 MiB value; then it reads every partition from
the start without a consumer group. Checked: exact keys, values, headers and timestamps;
offsets as the delivery reports gave them; the order within each partition; each key on
one partition; nothing more in the partition than was produced.

RUNNEL_TEST_TARGET=mock runs the same tests against librdkafka's mock cluster.
"""
import time
import unittest

from kafka_clients import (CREATE_TIME, ConfluentKafka, KafkaJS, KafkaPython, Kcat,
                           RdkafkaProgram, Rec, start_target)

PARTITIONS = 3
BIG = 1 << 20
# A 1 MiB value's batch is a little over 1 MiB: above Kafka's default max.message.bytes.
TOPIC_CONFIG = {"max.message.bytes": str(2 * BIG)}


def watermarks(bootstrap, topic, partitions):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)
                for p in range(partitions)}
    finally:
        c.close()


def round_trip_records(client, base_ts):
    """The records each client sends. kcat sends text lines, one set of headers per run of
    records, and stamps its own timestamps: its records are shaped to that."""
    ts = (lambda i: base_ts + i * 1000) if client.can_set_timestamp else (lambda i: None)

    def value(i):
        v = f"value-{i:03d}-".encode() + b"x" * (i % 7)
        if client.binary_values:
            v += bytes((i * 37 + j) % 256 for j in range(40))  # every byte value, tabs too
        return v

    def headers(i):
        if client.per_record_headers:
            return [("trace", f"t-{i}".encode()), ("dup", b"one"), ("dup", b"two"),
                    ("empty", b"")]
        return [("app", b"it"), ("dup", b"one"), ("dup", b"two")]

    recs = []
    # Keyed records left to the partitioner: six keys, four records each, interleaved.
    for i in range(24):
        recs.append(Rec(f"key-{i % 6}".encode(), value(i), headers(i), ts(i)))
    # Null keys, an empty key, empty and null values, on chosen partitions.
    recs.append(Rec(None, value(100), [], ts(100), 0))
    recs.append(Rec(None, value(101), [], ts(101), 0))
    recs.append(Rec(b"", value(102), [], ts(102), 1))
    recs.append(Rec(b"k-empty-value", b"", [], ts(103), 1))
    recs.append(Rec(b"k-null-value", None, [], ts(104), 1))
    if client.null_key_empty_value:
        recs.append(Rec(None, b"", [], ts(105), 0))
    if client.null_key_null_value:
        recs.append(Rec(None, None, [], ts(106), 0))
    # A 1 MiB value between small records of its partition.
    recs.append(Rec(b"before-big", value(107), [], ts(107), 2))
    big = bytes((i * 7 + i // 4096) % 256 for i in range(BIG)) if client.binary_values else \
        bytes(ord("a") + (i * 7 + i // 4096) % 26 for i in range(BIG))
    recs.append(Rec(b"big", big, [("size", str(BIG).encode())], ts(108), 2))
    recs.append(Rec(b"after-big", value(109), [], ts(109), 2))
    return recs


class ProduceConsumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = start_target()

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    def round_trip(self, client):
        topic = f"rt-{client.name}"
        bootstrap = self.target.bootstrap
        self.target.create_topic(topic, PARTITIONS, TOPIC_CONFIG)
        base_ts = int(time.time() * 1000) - 3_600_000  # an hour ago: not the client's clock
        records = round_trip_records(client, base_ts)
        t_before = int(time.time() * 1000)
        deliveries = client.produce(bootstrap, topic, records)
        t_after = int(time.time() * 1000)

        if deliveries is not None:
            self.assertEqual(len(deliveries), len(records))
            for i, d in enumerate(deliveries):
                self.assertIsNotNone(d, f"no delivery report for record {i}")
                self.assertEqual(d.error, "NO_ERROR", f"record {i}")
                if records[i].partition is not None:
                    self.assertEqual(d.partition, records[i].partition, f"record {i}")

        marks = watermarks(bootstrap, topic, PARTITIONS)
        for p, (low, high) in marks.items():
            self.assertEqual(low, 0, f"partition {p} log start")
        self.assertEqual(sum(high for _, high in marks.values()), len(records),
                         f"records in the topic: {marks}")
        got = client.consume(bootstrap, topic, {p: (0, high) for p, (_, high) in marks.items()})
        self.assertEqual(len(got), len(records))

        # Which partition each record went to: the delivery report's, else where its
        # (unique) value was read.
        by_value = {(g.key, g.value): g.partition for g in got}
        partition_of = []
        for i, r in enumerate(records):
            if deliveries is not None:
                partition_of.append(deliveries[i].partition)
            else:
                partition_of.append(by_value.get((r.key, r.value), -1))

        # Every key on one partition, consistently.
        key_partitions = {}
        for r, p in zip(records, partition_of):
            if r.key is not None and r.partition is None:
                key_partitions.setdefault(r.key, set()).add(p)
        for key, ps in key_partitions.items():
            self.assertEqual(len(ps), 1, f"key {key!r} landed on partitions {ps}")

        for p in range(PARTITIONS):
            expected = [(i, r) for i, r in enumerate(records) if partition_of[i] == p]
            read = [g for g in got if g.partition == p]
            self.assertEqual([g.offset for g in read], list(range(len(expected))),
                             f"partition {p}: offsets in the order read")
            for (i, r), g in zip(expected, read):
                what = f"partition {p} offset {g.offset} (record {i})"
                self.assertEqual(g.key, r.key, what)
                self.assertEqual(g.value, r.value, what)  # also the produce order
                self.assertEqual(g.headers, r.headers, what)
                self.assertEqual(g.timestamp_type, CREATE_TIME, what)
                if r.timestamp is not None:
                    self.assertEqual(g.timestamp, r.timestamp, what)
                else:
                    self.assertTrue(t_before - 1000 <= g.timestamp <= t_after + 1000,
                                    f"{what}: timestamp {g.timestamp} not the producer's clock")
                if deliveries is not None:
                    self.assertEqual(g.offset, deliveries[i].offset, f"{what}: delivery report")

    def test_librdkafka_c(self):
        self.round_trip(RdkafkaProgram("c"))

    def test_librdkafka_cpp(self):
        self.round_trip(RdkafkaProgram("cpp"))

    def test_confluent_kafka(self):
        self.round_trip(ConfluentKafka())

    def test_kafka_python(self):
        self.round_trip(KafkaPython())

    def test_kcat(self):
        self.round_trip(Kcat())

    def test_kafkajs(self):
        self.round_trip(KafkaJS())


if __name__ == "__main__":
    unittest.main()
