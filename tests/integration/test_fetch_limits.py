"""The node's fetch.max.bytes bounds every Fetch answer, as Kafka's broker key does: an answer
carries at most that many record bytes, whatever larger max_bytes the request names, except
that the first batch of the first partition with data goes out whole even when it alone is
larger (a consumer must always progress). A request asking for less than the node's bound
gets its own smaller bound. Checked with hand-built Fetch requests (kafka_wire.py), then
through librdkafka (confluent-kafka) reading every record back in order across many bounded
answers.
"""
import time
import unittest

from harness import Node
from kafka_clients import ConfluentKafka, RunnelTarget
from kafka_wire import Connection, batch_headers, record_batch

NODE_LIMIT = 8192  # fetch.max.bytes of the node
VALUE = 1900       # one record per batch: a batch is a little over 1,900 bytes


class FetchLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = RunnelTarget({"fetch.max.bytes": str(NODE_LIMIT)})
        cls.target.create_topic("limits", 2)
        now = int(time.time() * 1000)
        with Connection(cls.target.bootstrap) as conn:
            # Partition 0: 20 batches of one ~1.9 KB record. Partition 1: one batch larger
            # than the node's bound, then 5 small ones.
            cls.small = [record_batch([bytes([i]) * VALUE], now) for i in range(20)]
            cls.big = record_batch([b"B" * (NODE_LIMIT + 4000)], now)
            for batch in cls.small:
                cls.assert_appended(conn.produce(3, -1, "limits", {0: batch}), 0)
            cls.assert_appended(conn.produce(3, -1, "limits", {1: cls.big}), 1)
            for batch in cls.small[:5]:
                cls.assert_appended(conn.produce(3, -1, "limits", {1: batch}), 1)

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    @staticmethod
    def assert_appended(answer, partition):
        error = answer[("limits", partition)]["error"]
        if error != 0:
            raise AssertionError(f"produce to limits-{partition}: error {error}")

    def setUp(self):
        self.conn = Connection(self.target.bootstrap)

    def tearDown(self):
        self.conn.close()

    def test_the_node_bound_caps_a_larger_request(self):
        batch = len(self.small[0])
        fit = NODE_LIMIT // batch  # whole batches within the node's bound
        error, high_watermark, records = self.conn.fetch("limits", 0, 0, max_bytes=4 << 20)
        self.assertEqual((error, high_watermark), (0, 20))
        self.assertEqual(len(records), fit * batch)
        self.assertEqual([h["base_offset"] for h in batch_headers(records)], list(range(fit)))
        # The next fetch goes on from there.
        error, _, records = self.conn.fetch("limits", 0, fit, max_bytes=4 << 20)
        self.assertEqual(error, 0)
        self.assertEqual([h["base_offset"] for h in batch_headers(records)],
                         list(range(fit, 2 * fit)))

    def test_a_smaller_request_keeps_its_own_bound(self):
        batch = len(self.small[0])
        error, _, records = self.conn.fetch("limits", 0, 0, max_bytes=2 * batch + 10)
        self.assertEqual(error, 0)
        self.assertEqual(len(records), 2 * batch)

    def test_a_first_batch_over_the_bound_goes_out_whole_and_alone(self):
        answer = self.conn.fetch_partitions("limits", [(1, 0, 4 << 20), (0, 0, 4 << 20)],
                                            max_bytes=4 << 20)
        (p1, e1, hw1, r1), (p0, e0, hw0, r0) = answer
        self.assertEqual((p1, e1, hw1), (1, 0, 6))
        # Whole, though larger than fetch.max.bytes: the batch as produced, but for the
        # partition leader epoch (bytes 12-15) that the broker stamps.
        self.assertEqual(len(r1), len(self.big))
        self.assertEqual((r1[:12], r1[16:]), (self.big[:12], self.big[16:]))
        # The bound is used up: the next partition gets nothing this time.
        self.assertEqual((p0, e0, hw0, r0), (0, 0, 20, b""))

    def test_the_bound_is_shared_across_partitions(self):
        batch = len(self.small[0])
        answer = self.conn.fetch_partitions("limits", [(0, 0, 3 * batch), (1, 1, 4 << 20)],
                                            max_bytes=4 << 20)
        (p0, e0, _, r0), (p1, e1, _, r1) = answer
        self.assertEqual((p0, e0, p1, e1), (0, 0, 1, 0))
        self.assertEqual(len(r0), 3 * batch)
        left = (NODE_LIMIT - 3 * batch) // batch
        self.assertEqual([h["base_offset"] for h in batch_headers(r1)], list(range(1, 1 + left)))
        self.assertLessEqual(len(r0) + len(r1), NODE_LIMIT)

    def test_describe_configs_shows_the_node_bound(self):
        from confluent_kafka.admin import AdminClient, ConfigResource
        admin = AdminClient({"bootstrap.servers": self.target.bootstrap})
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        self.assertEqual(configs["fetch.max.bytes"].value, str(NODE_LIMIT))

    def test_librdkafka_reads_everything_through_bounded_answers(self):
        wants = {0: (0, 20), 1: (0, 6)}
        got = ConfluentKafka().consume(self.target.bootstrap, "limits", wants, timeout=60)
        for partition, count in ((0, 20), (1, 6)):
            offsets = [g.offset for g in got if g.partition == partition]
            self.assertEqual(offsets, list(range(count)))
        values = {(g.partition, g.offset): g.value for g in got}
        self.assertEqual(values[(1, 0)], b"B" * (NODE_LIMIT + 4000))
        for i in range(20):
            self.assertEqual(values[(0, i)], bytes([i]) * VALUE)


class DefaultBoundTest(unittest.TestCase):
    def test_default_is_16_mib_and_a_bad_value_names_the_key(self):
        from confluent_kafka.admin import AdminClient, ConfigResource
        node = Node().start()
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            resource = ConfigResource(ConfigResource.Type.BROKER, "1")
            configs = admin.describe_configs([resource])[resource].result(timeout=30)
            self.assertEqual(configs["fetch.max.bytes"].value, str(16 << 20))
            self.assertTrue(configs["fetch.max.bytes"].is_default)
        finally:
            node.cleanup()
        bad = Node(extra_config={"fetch.max.bytes": "1000"})
        try:
            out = bad.runnel("--config", bad.config_path)
            self.assertEqual(out.returncode, 2)
            self.assertIn("config error: fetch.max.bytes=1000", out.stderr)
        finally:
            bad.cleanup()

if __name__ == "__main__":
    unittest.main()
