"""Compressed batches across clients: what librdkafka produces with each of none, gzip,
snappy, lz4 and zstd, kafka-python and KafkaJS read back identically; and what kafka-python
and KafkaJS produce with each codec, librdkafka reads back identically. A raw Fetch also
checks that the broker kept each batch as it was produced (same codec, many records a batch).

KafkaJS's snappy, lz4 and zstd come from npm (see kafkajs_client.js); kafka-python's from
python3-snappy, python3-lz4 and python3-zstandard.
"""
import time
import unittest

from kafka_clients import (CREATE_TIME, ConfluentKafka, KafkaJS, KafkaPython, Rec,
                           start_target)
from kafka_wire import CODECS, Connection, batch_headers

CODEC_NAMES = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 2
RECORDS = 200
FIND_COORDINATOR = 10  # API key


def compressible_records(base_ts):
    recs = []
    for i in range(RECORDS):
        value = (f"order {i:05d} " * (1 + i % 9)).encode() + bytes([i % 256, 0, 255, 10, 9])
        key = None if i % 10 == 0 else f"customer-{i % 13}".encode()
        headers = [("seq", str(i).encode()), ("source", b"compression-it")]
        if i % 50 == 7:
            value = b""
        recs.append(Rec(key, value, headers, base_ts + i, i % PARTITIONS))
    return recs


class CompressionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = start_target()
        try:
            cls.kafkajs = KafkaJS()
            cls.kafkajs_missing = None
        except unittest.SkipTest as e:
            cls.kafkajs, cls.kafkajs_missing = None, str(e)

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    def produce(self, producer, codec):
        topic = f"cx-{producer.name}-{codec}"
        self.target.create_topic(topic, PARTITIONS)
        records = compressible_records(int(time.time() * 1000) - 60_000)
        # A long linger and flush() at the end: every partition's records in one or a few
        # batches, however slowly this process runs. KafkaJS sends one batch a send().
        linger = {"linger_ms": 5000} if isinstance(producer, KafkaPython) else \
            {} if producer is self.kafkajs else {"linger.ms": 5000}
        deliveries = producer.produce(self.target.bootstrap, topic, records, compression=codec,
                                      config=linger)
        for i, d in enumerate(deliveries):
            self.assertEqual(d.error, "NO_ERROR", f"{producer.name} {codec}: record {i}")
            self.assertEqual(d.partition, records[i].partition)
        stored = codec
        if codec == "lz4" and isinstance(producer, ConfluentKafka):
            # librdkafka (rdkafka_feature.c) turns lz4 on only when the broker advertises
            # FindCoordinator, which arrives with consumer groups; until then it must send
            # these batches uncompressed, and the broker must store exactly that.
            with Connection(self.target.bootstrap) as conn:
                if FIND_COORDINATOR not in conn.api_keys():
                    stored = "none"
        self.assert_stored_as_produced(topic, stored)
        return topic, records, deliveries

    def assert_stored_as_produced(self, topic, codec):
        """The broker keeps the producer's batches: their codec, several records each."""
        batches = []
        with Connection(self.target.bootstrap) as conn:
            offset = 0
            for _ in range(RECORDS):  # a fetch may stop short of the end: ask again
                error, high_watermark, data = conn.fetch(topic, 0, offset, max_bytes=4 << 20)
                self.assertEqual(error, 0)
                self.assertEqual(high_watermark, RECORDS // PARTITIONS)
                fetched = [b for b in batch_headers(data) if b["base_offset"] >= offset]
                self.assertTrue(fetched, f"no batch fetched at offset {offset}")
                batches += fetched
                offset = fetched[-1]["base_offset"] + fetched[-1]["last_offset_delta"] + 1
                if offset >= high_watermark:
                    break
        # librdkafka sends a batch uncompressed when compressing did not make it smaller.
        codecs = [b["codec"] for b in batches]
        self.assertIn(CODECS[codec], codecs, f"{codec} produced; stored batches "
                      f"(codec, records): {[(b['codec'], b['count']) for b in batches]}")
        self.assertLessEqual(set(codecs), {CODECS[codec], 0}, f"{codec} produced")
        self.assertGreater(max(b["count"] for b in batches), 1, "one record a batch")
        self.assertEqual(sum(b["count"] for b in batches), RECORDS // PARTITIONS)

    def assert_read_back(self, reader, topic, records, deliveries, what):
        got = reader.consume(self.target.bootstrap, topic,
                             {p: (0, RECORDS // PARTITIONS) for p in range(PARTITIONS)})
        self.assertEqual(len(got), len(records), what)
        for p in range(PARTITIONS):
            expected = [(i, r) for i, r in enumerate(records) if r.partition == p]
            read = [g for g in got if g.partition == p]
            self.assertEqual(len(read), len(expected), what)
            for (i, r), g in zip(expected, read):
                w = f"{what}: partition {p} record {i}"
                self.assertEqual(g.offset, deliveries[i].offset, w)
                self.assertEqual((g.key, g.value, g.headers), (r.key, r.value, r.headers), w)
                self.assertEqual((g.timestamp, g.timestamp_type), (r.timestamp, CREATE_TIME), w)

    def test_librdkafka_batches_read_by_kafka_python_and_kafkajs(self):
        readers = [KafkaPython()] + ([self.kafkajs] if self.kafkajs else [])
        for codec in CODEC_NAMES:
            with self.subTest(codec=codec):
                topic, records, deliveries = self.produce(ConfluentKafka(), codec)
                for reader in readers:
                    self.assert_read_back(reader, topic, records, deliveries,
                                          f"librdkafka {codec} read by {reader.name}")
        if not self.kafkajs:
            self.skipTest(f"KafkaJS did not read: {self.kafkajs_missing}")

    def test_kafka_python_batches_read_by_librdkafka(self):
        producer = KafkaPython()
        for codec in CODEC_NAMES:
            with self.subTest(codec=codec):
                missing = producer.codec_missing(codec)
                if missing:
                    self.skipTest(missing)
                topic, records, deliveries = self.produce(producer, codec)
                self.assert_read_back(ConfluentKafka(), topic, records, deliveries,
                                      f"kafka-python {codec} read by librdkafka")

    def test_kafkajs_batches_read_by_librdkafka(self):
        if not self.kafkajs:
            self.skipTest(self.kafkajs_missing)
        for codec in CODEC_NAMES:
            with self.subTest(codec=codec):
                topic, records, deliveries = self.produce(self.kafkajs, codec)
                self.assert_read_back(ConfluentKafka(), topic, records, deliveries,
                                      f"KafkaJS {codec} read by librdkafka")


if __name__ == "__main__":
    unittest.main()
