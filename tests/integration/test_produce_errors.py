"""Produce and fetch errors answered with the code a Kafka broker gives, checked through
clients where a client can cause them and with hand-built requests (kafka_wire.py) where no
client would send such a request. Kafka's rules, as its broker applies them:

- a partition the broker does not have: UNKNOWN_TOPIC_OR_PARTITION (3), per partition;
- a batch larger than the topic's max.message.bytes: MESSAGE_TOO_LARGE (10);
- acks other than -1, 0 or 1: INVALID_REQUIRED_ACKS (21) for every partition;
- a batch whose CRC does not match: CORRUPT_MESSAGE (2);
- Produce v3+ with more than one batch for a partition, or a batch whose base offset is not
  0: INVALID_RECORD (87);
- a fetch offset past the log end: OFFSET_OUT_OF_RANGE (1);
- Produce v0-v2: UNSUPPORTED_VERSION (35) (issue 4: advertised from 0 for librdkafka's sake,
  refused below 3);
- acks=0: no answer at all.

After each refused request nothing was appended, and the connection still serves.
"""
import time
import unittest

from kafka_clients import ConfluentKafka, KafkaPython, Rec, skip_on_mock, start_target
from kafka_wire import (CORRUPT_MESSAGE, INVALID_RECORD, INVALID_REQUIRED_ACKS,
                        MESSAGE_TOO_LARGE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION,
                        PRODUCE, UNSUPPORTED_VERSION, Connection, produce_body,
                        record_batch)

SMALL_LIMIT = 10000  # max.message.bytes of the topic "small"


class ProduceErrorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = start_target({"auto.create.topics.enable": "false"})
        cls.target.create_topic("errs", 2)
        cls.target.create_topic("small", 1, {"max.message.bytes": str(SMALL_LIMIT)})

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    def setUp(self):
        self.conn = Connection(self.target.bootstrap)

    def tearDown(self):
        self.conn.close()

    def now(self):
        return int(time.time() * 1000)

    def high_watermark(self, topic, partition=0):
        error, hw, _ = self.conn.fetch(topic, partition, 0)
        self.assertEqual(error, 0)
        return hw

    def produce_one(self, topic, partition, batch, version=3, acks=-1):
        answer = self.conn.produce(version, acks, topic, {partition: batch})
        self.assertEqual(list(answer), [(topic, partition)], answer)
        return answer[(topic, partition)]

    def assert_connection_serves(self, topic="errs", partition=0):
        """A valid batch on the same connection is appended after the refused request."""
        before = self.high_watermark(topic, partition)
        entry = self.produce_one(topic, partition, record_batch([b"still-serving"], self.now()))
        self.assertEqual(entry["error"], 0, entry)
        self.assertEqual(entry["base_offset"], before)

    def test_hand_built_batch_is_accepted_and_read_back(self):
        # The control for every hand-built case below: a valid batch is taken.
        ts = self.now()
        before = self.high_watermark("errs", 1)
        entry = self.produce_one("errs", 1, record_batch([b"one", b"two"], ts, key=b"k"))
        self.assertEqual(entry["error"], 0, entry)
        self.assertEqual(entry["base_offset"], before)
        got = ConfluentKafka().consume(self.target.bootstrap, "errs", {1: (before, 2)})
        self.assertEqual([(g.key, g.value, g.timestamp) for g in got],
                         [(b"k", b"one", ts), (b"k", b"two", ts)])

    @skip_on_mock("the mock answers acks=0 requests")
    def test_acks_zero_is_not_answered(self):
        # The next answer on the connection is the next request's: none came for acks=0.
        before = self.high_watermark("errs", 1)
        body = produce_body(3, 0, 10000, "errs", {1: record_batch([b"fire"], self.now())})
        self.conn.request(PRODUCE, 3, body, expect_response=False)
        self.assertEqual(self.high_watermark("errs", 1), before + 1)

    def test_unknown_topic_or_partition(self):
        batch = record_batch([b"nowhere"], self.now())
        self.assertEqual(self.produce_one("errs", 7, batch)["error"], UNKNOWN_TOPIC_OR_PARTITION)
        self.assertEqual(self.produce_one("no-such-topic", 0, batch)["error"],
                         UNKNOWN_TOPIC_OR_PARTITION)
        # One request, a good and a bad partition: each answered on its own.
        answer = self.conn.produce(3, -1, "errs", {0: batch, 9: batch})
        self.assertEqual(answer[("errs", 0)]["error"], 0)
        self.assertEqual(answer[("errs", 9)]["error"], UNKNOWN_TOPIC_OR_PARTITION)
        # auto.create.topics.enable=false: producing did not create the topic.
        from confluent_kafka.admin import AdminClient
        topics = AdminClient({"bootstrap.servers": self.target.bootstrap}).list_topics(
            timeout=10).topics
        self.assertNotIn("no-such-topic", topics)
        self.assert_connection_serves()

    @skip_on_mock("the mock has no topic configs")
    def test_message_too_large(self):
        big = b"x" * (SMALL_LIMIT * 2)
        # librdkafka's own limit (message.max.bytes) is above the topic's: the broker refuses.
        [d] = ConfluentKafka().produce(self.target.bootstrap, "small",
                                       [Rec(None, big, [], None, 0)],
                                       config={"message.max.bytes": 1000000, "retries": 0})
        self.assertEqual(d.error, "MSG_SIZE_TOO_LARGE")
        [d] = KafkaPython().produce(self.target.bootstrap, "small",
                                    [Rec(None, big, [], None, 0)],
                                    config={"max_request_size": 1000000, "retries": 0})
        self.assertEqual(d.error, "MessageSizeTooLargeError")
        entry = self.produce_one("small", 0, record_batch([big], self.now()))
        self.assertEqual(entry["error"], MESSAGE_TOO_LARGE, entry)
        self.assertEqual(self.high_watermark("small"), 0)
        # Just under the limit is taken.
        [d] = ConfluentKafka().produce(self.target.bootstrap, "small",
                                       [Rec(None, b"y" * (SMALL_LIMIT - 200), [], None, 0)])
        self.assertEqual(d.error, "NO_ERROR")
        self.assert_connection_serves("small")

    @skip_on_mock("the mock takes any acks")
    def test_invalid_required_acks(self):
        before = self.high_watermark("errs")
        answer = self.conn.produce(3, 2, "errs", {0: record_batch([b"acks-2"], self.now()),
                                                  1: record_batch([b"acks-2"], self.now())})
        self.assertEqual({k: v["error"] for k, v in answer.items()},
                         {("errs", 0): INVALID_REQUIRED_ACKS, ("errs", 1): INVALID_REQUIRED_ACKS})
        self.assertEqual(self.high_watermark("errs"), before)
        self.assert_connection_serves()

    @skip_on_mock("the mock does not check CRCs")
    def test_corrupt_message(self):
        before = self.high_watermark("errs")
        entry = self.produce_one("errs", 0, record_batch([b"bad crc"], self.now(),
                                                         corrupt_crc=True))
        self.assertEqual(entry["error"], CORRUPT_MESSAGE, entry)
        self.assertEqual(self.high_watermark("errs"), before)
        self.assert_connection_serves()

    @skip_on_mock("the mock does not check CRCs")
    def test_bad_batches_in_requests_over_64_kib(self):
        """A request over 64 KiB is read straight into the memory brokerd shares with
        storaged. A bad batch there fails alone, with Kafka's code, as in a small request;
        the request's good batch is appended, and the next large request is served."""
        value = b"v" * (100 * 1024)
        before = [self.high_watermark("errs", p) for p in (0, 1)]
        small_before = self.high_watermark("small")
        answer = self.conn.produce(3, -1, "errs", {
            0: record_batch([value], self.now(), corrupt_crc=True),
            1: record_batch([value], self.now())})
        self.assertEqual(answer[("errs", 0)]["error"], CORRUPT_MESSAGE, answer)
        self.assertEqual(answer[("errs", 1)]["error"], 0, answer)
        self.assertEqual(answer[("errs", 1)]["base_offset"], before[1])
        self.assertEqual(self.high_watermark("errs", 0), before[0])
        self.assertEqual(self.high_watermark("errs", 1), before[1] + 1)
        two = record_batch([value], self.now()) + record_batch([b"second"], self.now())
        self.assertEqual(self.produce_one("errs", 0, two)["error"], INVALID_RECORD)
        self.assertEqual(self.produce_one("small", 0, record_batch([value], self.now()))["error"],
                         MESSAGE_TOO_LARGE)
        self.assertEqual(self.high_watermark("errs", 0), before[0])
        self.assertEqual(self.high_watermark("small"), small_before)
        # A client's own large request after them: appended and read back whole.
        [d] = ConfluentKafka().produce(self.target.bootstrap, "errs",
                                       [Rec(b"big", value, [], None, 0)])
        self.assertEqual(d.error, "NO_ERROR")
        error, hw, records = self.conn.fetch("errs", 0, before[0], max_bytes=4 << 20)
        self.assertEqual((error, hw), (0, before[0] + 1))
        self.assertIn(value, records)
        self.assert_connection_serves()

    @skip_on_mock("the mock takes what it is given")
    def test_invalid_record(self):
        before = self.high_watermark("errs")
        two = record_batch([b"first"], self.now()) + record_batch([b"second"], self.now())
        entry = self.produce_one("errs", 0, two)
        self.assertEqual(entry["error"], INVALID_RECORD, entry)
        entry = self.produce_one("errs", 0, record_batch([b"offset 5"], self.now(),
                                                         base_offset=5))
        self.assertEqual(entry["error"], INVALID_RECORD, entry)
        self.assertEqual(self.high_watermark("errs"), before)
        self.assert_connection_serves()

    def test_offset_out_of_range(self):
        [d] = ConfluentKafka().produce(self.target.bootstrap, "errs",
                                       [Rec(b"k", b"v", [], None, 1)])
        self.assertEqual(d.error, "NO_ERROR")
        end = self.high_watermark("errs", 1)
        error, _, _ = self.conn.fetch("errs", 1, end + 1000)
        self.assertEqual(error, OFFSET_OUT_OF_RANGE)
        error, _, data = self.conn.fetch("errs", 1, end)  # the log end itself is in range
        self.assertEqual((error, data), (0, b""))

        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import OffsetOutOfRangeError
        consumer = KafkaConsumer(bootstrap_servers=self.target.bootstrap, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="none")
        try:
            tp = TopicPartition("errs", 1)
            consumer.assign([tp])
            consumer.seek(tp, end + 1000)
            deadline = time.monotonic() + 20
            with self.assertRaises(OffsetOutOfRangeError):
                while time.monotonic() < deadline:
                    consumer.poll(timeout_ms=500)
        finally:
            consumer.close()

    @skip_on_mock("the mock serves Produce v0-v7")
    def test_produce_v0_to_v2_unsupported(self):
        before = self.high_watermark("errs")
        batch = record_batch([b"old version"], self.now())
        for version in (0, 1, 2):
            answer = self.conn.produce(version, 1, "errs", {0: batch})
            self.assertEqual(answer[("errs", 0)]["error"], UNSUPPORTED_VERSION,
                             f"Produce v{version}: {answer}")
        self.assertEqual(self.high_watermark("errs"), before)
        self.assert_connection_serves()


if __name__ == "__main__":
    unittest.main()
