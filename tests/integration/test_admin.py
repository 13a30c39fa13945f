"""Topic administration through real Kafka clients: kafka-python, confluent-kafka, kcat."""
import subprocess
import time
import unittest

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic as CNewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import (InvalidPartitionsError, InvalidReplicationAssignmentError,
                          InvalidReplicationFactorError, InvalidTopicError,
                          TopicAlreadyExistsError, UnknownTopicOrPartitionError)

from harness import Node, metadata_v4_topic_error, wait_until


def kcat_list(bootstrap):
    out = subprocess.run(["kcat", "-L", "-b", bootstrap, "-m", "10"], capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        raise AssertionError(f"kcat -L failed: {out.stderr}")
    return out.stdout


def kcat_topics(bootstrap):
    """{topic: partition count} from kcat -L."""
    topics = {}
    for line in kcat_list(bootstrap).splitlines():
        line = line.strip()
        if line.startswith('topic "'):
            name = line.split('"')[1]
            topics[name] = int(line.split(" with ")[1].split()[0])
    return topics


class AdminTest(unittest.TestCase):
    def setUp(self):
        self.node = Node().start()

    def tearDown(self):
        self.node.cleanup()

    def test_kcat_lists_broker_one(self):
        out = kcat_list(self.node.bootstrap)
        self.assertIn("1 brokers:", out)
        self.assertIn(f"broker 1 at 127.0.0.1:{self.node.port}", out)

    def test_kafka_python_create_delete_survive_restart(self):
        admin = KafkaAdminClient(bootstrap_servers=self.node.bootstrap, request_timeout_ms=20000)
        admin.create_topics([
            NewTopic("orders", num_partitions=12, replication_factor=1,
                     topic_configs={"retention.ms": "3600000", "cleanup.policy": "compact"}),
            NewTopic("payments", num_partitions=3, replication_factor=1),
            NewTopic("scratch", num_partitions=1, replication_factor=1),
        ])
        topics = kcat_topics(self.node.bootstrap)
        self.assertEqual(topics.get("orders"), 12)
        self.assertEqual(topics.get("payments"), 3)
        self.assertEqual(topics.get("scratch"), 1)

        admin.delete_topics(["scratch"])
        self.assertNotIn("scratch", kcat_topics(self.node.bootstrap))
        admin.close()

        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        topics = kcat_topics(self.node.bootstrap)
        self.assertEqual(topics, {"orders": 12, "payments": 3})

    def test_kafka_python_errors(self):
        admin = KafkaAdminClient(bootstrap_servers=self.node.bootstrap, request_timeout_ms=20000)
        admin.create_topics([NewTopic("dup", 1, 1)])
        with self.assertRaises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("dup", 1, 1)])
        with self.assertRaises(InvalidTopicError):
            admin.create_topics([NewTopic("bad/name", 1, 1)])
        with self.assertRaises(InvalidPartitionsError):
            admin.create_topics([NewTopic("zero-parts", 0, 1)])
        with self.assertRaises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("too-many-replicas", 1, 3)])
        with self.assertRaises(UnknownTopicOrPartitionError):
            admin.delete_topics(["never-created"])
        # Manual replica assignment.
        admin.create_topics([NewTopic("placed", -1, -1, replica_assignments={0: [1], 1: [1]})])
        self.assertEqual(kcat_topics(self.node.bootstrap).get("placed"), 2)
        with self.assertRaises(InvalidReplicationAssignmentError):
            admin.create_topics([NewTopic("nowhere", -1, -1, replica_assignments={0: [7]})])
        with self.assertRaises(InvalidReplicationAssignmentError):
            admin.create_topics([NewTopic("gap", -1, -1, replica_assignments={0: [1], 2: [1]})])
        # validate_only changes nothing.
        admin.create_topics([NewTopic("dry-run", 4, 1)], validate_only=True)
        self.assertNotIn("dry-run", kcat_topics(self.node.bootstrap))
        self.assertEqual(set(kcat_topics(self.node.bootstrap)), {"dup", "placed"})
        admin.close()

    def test_confluent_admin_create_delete_survive_restart(self):
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        futures = admin.create_topics([
            CNewTopic("c-orders", num_partitions=12, replication_factor=1,
                      config={"retention.ms": "3600000", "max.message.bytes": "2000000"}),
            CNewTopic("c-payments", num_partitions=2, replication_factor=1),
            CNewTopic("c-scratch", num_partitions=1, replication_factor=1),
        ], request_timeout=20)
        for f in futures.values():
            f.result(timeout=30)
        md = admin.list_topics(timeout=10)
        self.assertEqual(len(md.topics["c-orders"].partitions), 12)
        self.assertEqual(list(md.brokers), [1])
        self.assertEqual(md.brokers[1].port, self.node.port)

        for f in admin.delete_topics(["c-scratch"], request_timeout=20).values():
            f.result(timeout=30)
        self.assertNotIn("c-scratch", admin.list_topics(timeout=10).topics)

        # Errors come back per topic.
        futures = admin.create_topics([CNewTopic("c-orders", 1, 1), CNewTopic("ok-one", 1, 1)],
                                      request_timeout=20)
        with self.assertRaises(KafkaException) as ctx:
            futures["c-orders"].result(timeout=30)
        self.assertEqual(ctx.exception.args[0].name(), "TOPIC_ALREADY_EXISTS")
        futures["ok-one"].result(timeout=30)

        futures = admin.create_topics([CNewTopic("bad-config", 1, 1,
                                                 config={"retention.ms": "soon"})],
                                      request_timeout=20)
        with self.assertRaises(KafkaException) as ctx:
            futures["bad-config"].result(timeout=30)
        self.assertEqual(ctx.exception.args[0].name(), "INVALID_CONFIG")
        self.assertIn("retention.ms", ctx.exception.args[0].str())

        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        topics = admin.list_topics(timeout=10).topics
        self.assertEqual(set(topics), {"c-orders", "c-payments", "ok-one"})
        self.assertEqual(len(topics["c-orders"].partitions), 12)

    def test_metadata_auto_creates_topics(self):
        self.node.stop()
        node = Node(extra_config={"num.partitions": "3"}).start()
        try:
            # Not allowed by the request: not created.
            self.assertEqual(metadata_v4_topic_error(node.port, "manual-only", False), 3)
            # Allowed: LEADER_NOT_AVAILABLE while it is created with num.partitions.
            self.assertEqual(metadata_v4_topic_error(node.port, "auto-one", True), 5)
            wait_until(lambda: metadata_v4_topic_error(node.port, "auto-one", True) == 0, 10,
                       "auto-one created")
            topics = kcat_topics(node.bootstrap)
            self.assertEqual(topics.get("auto-one"), 3)
            self.assertNotIn("manual-only", topics)
            # An illegal name is never created.
            self.assertEqual(metadata_v4_topic_error(node.port, "bad name", True), 17)
        finally:
            node.cleanup()

    def test_auto_create_disabled_by_config(self):
        self.node.stop()
        node = Node(extra_config={"auto.create.topics.enable": "false"}).start()
        try:
            self.assertEqual(metadata_v4_topic_error(node.port, "auto-two", True), 3)
            self.assertNotIn("auto-two", kcat_topics(node.bootstrap))
        finally:
            node.cleanup()


if __name__ == "__main__":
    unittest.main()
