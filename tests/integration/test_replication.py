"""Replication across nodes (issue 24), as far as it is built.

Followers do not copy their leader yet. Until they do, a partition of replication factor 3
has its three replicas placed but only its leader in its ISR: Metadata must not call a
replica in sync that holds none of the data, no election may pick one, and acks=all with
min.insync.replicas above 1 is refused (NOT_ENOUGH_REPLICAS) instead of acknowledged by a
leader alone. Three combined nodes (broker + controller) on 127.0.0.1."""

import time
import unittest

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from harness import Node, wait_until
from kafka_wire import NONE, UNKNOWN_TOPIC_OR_PARTITION, Connection, record_batch
from test_quorum import ClusterCase

NOT_ENOUGH_REPLICAS = 19
NOT_LEADER_OR_FOLLOWER = 6
SESSION_TIMEOUT_MS = 3000


class HonestIsrTest(ClusterCase):
    def setUp(self):
        common = self.quorum_config(**{
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": "500",
        })
        self.nodes = [Node(common, node_id=i) for i in (1, 2, 3)]
        self.start_all()

    def create(self, name, partitions, configs=None):
        admin = AdminClient({"bootstrap.servers": self.nodes[0].bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 3, config=configs or {})],
                                      operation_timeout=10, request_timeout=10)
        futures[name].result(timeout=20)
        # Every node's broker knows the topic's leaders before the test uses them.
        for node in self.nodes:
            def known(node=node):
                parts = self.partitions(node, name)
                return len(parts) == partitions and all(p.leader > 0 for p in parts.values())
            wait_until(known, 20, f"{name}'s leaders known to node {node.node_id}")

    @staticmethod
    def produce(conn, acks, topic, value):
        """One Produce v8 to partition 0, retried while the leader has not made the new
        partition's log yet (UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER, which
        clients retry)."""
        found = {}

        def answered():
            r = conn.produce(8, acks, topic, {0: record_batch([value], int(time.time() * 1000))})
            found["r"] = r[(topic, 0)]
            return found["r"]["error"] not in (UNKNOWN_TOPIC_OR_PARTITION,
                                                NOT_LEADER_OR_FOLLOWER)
        wait_until(answered, 20, f"an answer from {topic}-0's leader")
        return found["r"]

    def partitions(self, node, name):
        md = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(name, timeout=10)
        topic = md.topics.get(name)
        return {} if topic is None or topic.error is not None else topic.partitions

    def test_only_the_leader_is_in_sync_and_min_isr_refuses_acks_all(self):
        self.create("rf3", 3, {"min.insync.replicas": "2"})
        self.create("rf3-min1", 1)
        for name in ("rf3", "rf3-min1"):
            for p in self.partitions(self.nodes[0], name).values():
                self.assertEqual(len(set(p.replicas)), 3, p)
                self.assertEqual(p.isrs, [p.leader], p)

        leader = self.partitions(self.nodes[0], "rf3")[0].leader
        conn = Connection(self.nodes[leader - 1].bootstrap)
        self.addCleanup(conn.sock.close)
        refused = self.produce(conn, -1, "rf3", b"refused")
        self.assertEqual(refused["error"], NOT_ENOUGH_REPLICAS, refused)
        self.assertIn("min.insync.replicas 2", refused["error_message"])
        # acks=1 asks only the leader, as in Kafka.
        one = self.produce(conn, 1, "rf3", b"kept")
        self.assertEqual(one["error"], NONE, one)
        self.assertEqual(one["base_offset"], 0, "the refused batch was not appended")
        error, high_watermark, _records = conn.fetch("rf3", 0, 0)
        self.assertEqual((error, high_watermark), (NONE, 1))

        leader = self.partitions(self.nodes[0], "rf3-min1")[0].leader
        conn1 = Connection(self.nodes[leader - 1].bootstrap)
        self.addCleanup(conn1.sock.close)
        ok = self.produce(conn1, -1, "rf3-min1", b"v")
        self.assertEqual(ok["error"], NONE, ok)
        # Raised at run time, the topic's min.insync.replicas applies to the next produce.
        admin = AdminClient({"bootstrap.servers": self.nodes[0].bootstrap})
        resource = ConfigResource(ConfigResource.Type.TOPIC, "rf3-min1",
                                  set_config={"min.insync.replicas": "2"})
        for future in admin.alter_configs([resource], request_timeout=20).values():
            future.result(timeout=30)

        def refused_now():
            return self.produce(conn1, -1, "rf3-min1", b"w")["error"] == NOT_ENOUGH_REPLICAS
        wait_until(refused_now, 20, "acks=all refused after min.insync.replicas became 2")

    def test_a_killed_leaders_partition_waits_for_it_and_keeps_its_records(self):
        self.create("wait", 1)
        leader = self.partitions(self.nodes[0], "wait")[0].leader
        victim = self.nodes[leader - 1]
        witness = next(n for n in self.nodes if n is not victim)
        bootstrap = ",".join(n.bootstrap for n in self.nodes)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        values = [f"v{i}".encode() for i in range(100)]
        for v in values:
            producer.produce("wait", value=v, partition=0)
        self.assertEqual(producer.flush(20), 0)

        victim.kill_all()
        # Fenced after its session: no replica with the data is left to lead, so the partition
        # has no leader and its ISR keeps the victim (Kafka's rule without unclean election).
        wait_until(lambda: (lambda p: p.leader == -1 and p.isrs == [leader])(
                       self.partitions(witness, "wait")[0]),
                   SESSION_TIMEOUT_MS / 1000 + 20, "the partition without a leader")

        victim.start(wait=False)
        victim.wait_ready(timeout=60)
        wait_until(lambda: self.partitions(witness, "wait")[0].leader == leader, 30,
                   "the restarted node leading its partition again")
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wait-check",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("wait", 0, 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(values) and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and not m.error():
                    got.append(m.value())
        finally:
            consumer.close()
        self.assertEqual(got, values)


if __name__ == "__main__":
    unittest.main()
