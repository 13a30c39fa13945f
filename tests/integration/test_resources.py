"""A node that runs out of a resource neither lies nor dies (issue "Scale").

The log dir is a tmpfs the test mounts with few inodes, so partition logs can no longer be
created past a few dozen: a real limit, hit as a user would hit a full disk. Checked:
- CreateTopics of a topic whose logs cannot all be created fails with KAFKA_STORAGE_ERROR
  naming the reason, and nothing of that topic stays (not in Metadata, no partition
  directory left);
- Metadata claims no partition the node does not have: every partition listed has its
  leader and its log;
- once space is freed (a topic deleted), topics can be created again;
- the node stops cleanly and starts again, and every record produced before is readable.
A second test fills a small tmpfs with records: produce then fails with the retriable
KAFKA_STORAGE_ERROR, nothing acknowledged is damaged, and once a topic is deleted the same
partition takes records again, also after a restart.

Mounting needs root (CI runs as root); elsewhere the test skips, saying so.
"""
import os
import re
import subprocess
import time
import unittest

from harness import Node, wait_until
from kafka_wire import Connection, record_batch

INODES = 400
KEPT_RECORDS = 300


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30)


class SmallLogDir(unittest.TestCase):
    """A node whose log dir is a tmpfs of MOUNT_OPTIONS."""
    MOUNT_OPTIONS = f"size=64m,nr_inodes={INODES}"

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("mounting a small tmpfs for the log dir needs root (CI runs as root)")
        self.node = Node({"auto.create.topics.enable": "false"})
        self.logs = os.path.join(self.node.dir, "logs")
        os.makedirs(self.logs)
        r = run("mount", "-t", "tmpfs", "-o", self.MOUNT_OPTIONS, "runnel-test", self.logs)
        if r.returncode != 0:
            self.node.cleanup()
            self.skipTest(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        self.addCleanup(self._unmount)
        self.node.start()

    def _unmount(self):
        try:
            self.node.stop()
        finally:
            run("umount", self.logs)
            self.node.cleanup()

    def admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.node.bootstrap})

    def create(self, admin, name, partitions):
        """None when created, else the KafkaError."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic
        f = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=20)[name]
        try:
            f.result(timeout=40)
            return None
        except KafkaException as e:
            return e.args[0]

    def produce(self, topic, n, start):
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.node.bootstrap, "acks": "all",
                      "message.timeout.ms": "30000"})
        failed = []
        for i in range(start, start + n):
            p.produce(topic, value=f"v{i}".encode(), partition=i % 3,
                      on_delivery=lambda err, msg: err and failed.append(err))
        self.assertEqual(p.flush(40), 0, "records still unacknowledged")
        self.assertEqual(failed, [])

    def consume_all(self, topic, partitions, want):
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": "unused",
                      "enable.auto.commit": "false"})
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = set()
        deadline = time.monotonic() + 40
        try:
            while len(got) < want and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None or m.error():
                    continue
                got.add(m.value().decode())
        finally:
            c.close()
        return got

    def check_metadata_claims_only_what_is_there(self, admin, gone, created):
        """No partition is listed with a leader whose log is not there; the topics the test
        created all have theirs. (Others, like __consumer_offsets that the consumer's group
        coordinator lookup creates, may find no room left: then they have no leader.)"""
        md = admin.list_topics(timeout=10)
        self.assertNotIn(gone, md.topics, f"{gone} was rolled back but is listed")
        for name in created:
            self.assertIn(name, md.topics)
        for name, t in md.topics.items():
            for pid, p in t.partitions.items():
                has_log = os.path.isdir(os.path.join(self.logs, f"{name}-{pid}"))
                if p.leader == 1:
                    self.assertTrue(has_log, f"{name}-{pid} is listed with a leader but no log")
                else:
                    self.assertEqual(p.leader, -1)
                    self.assertEqual(p.error.name(), "LEADER_NOT_AVAILABLE")
                    self.assertNotIn(name, created, f"{name}-{pid} has no leader")

    def live_dirs(self, topic):
        return [d for d in os.listdir(self.logs) if re.fullmatch(rf"{re.escape(topic)}-\d+", d)]


class OutOfInodesTest(SmallLogDir):
    def test_out_of_inodes(self):
        admin = self.admin()
        self.assertIsNone(self.create(admin, "kept", 3))
        self.produce("kept", KEPT_RECORDS, 0)

        created, refused = [], None
        for i in range(40):  # 400 partitions would need far more than INODES inodes
            name = f"fill{i}"
            err = self.create(admin, name, 10)
            if err is None:
                created.append(name)
                continue
            refused = (name, err)
            break
        self.assertIsNotNone(refused, "the tmpfs never ran out of inodes")
        name, err = refused
        self.assertEqual(err.name(), "KAFKA_STORAGE_ERROR", str(err))
        self.assertIn("No space left on device", err.str())
        self.assertGreater(len(created), 0)

        # Nothing of the refused topic stays: not in the metadata, no partition directory.
        wait_until(lambda: name not in admin.list_topics(timeout=10).topics, 20,
                   f"{name} gone from the metadata")
        wait_until(lambda: not self.live_dirs(name), 20, f"{name}'s partition dirs removed")
        self.check_metadata_claims_only_what_is_there(admin, name, ["kept"] + created)
        log = self.node.log()
        self.assertIn("cannot create the log of", log)

        # Space freed: a new topic fits again, and produce to the old ones goes on.
        f = admin.delete_topics([created[-1]], operation_timeout=20)[created[-1]]
        f.result(timeout=30)
        wait_until(lambda: not self.live_dirs(created[-1]), 20, "deleted topic's dirs removed")
        self.assertIsNone(self.create(admin, "again", 2))
        self.produce("kept", KEPT_RECORDS, KEPT_RECORDS)

        # A clean stop, a start, and every record is still there.
        started = time.monotonic()
        self.assertEqual(self.node.stop(), 0, self.node.log()[-3000:])
        self.assertLess(time.monotonic() - started, 20)
        self.node.start()
        got = self.consume_all("kept", 3, 2 * KEPT_RECORDS)
        self.assertEqual(got, {f"v{i}" for i in range(2 * KEPT_RECORDS)})
        self.check_metadata_claims_only_what_is_there(self.admin(), name,
                                                      ["kept", "again"] + created[:-1])


KAFKA_STORAGE_ERROR = 56


class DiskFullTest(SmallLogDir):
    MOUNT_OPTIONS = "size=4m,nr_inodes=4000"

    def high_watermark(self, conn, topic):
        error, hw, _ = conn.fetch(topic, 0, 0, max_bytes=1)
        self.assertEqual(error, 0)
        return hw

    def test_disk_full(self):
        admin = self.admin()
        self.assertIsNone(self.create(admin, "spare", 1))
        self.assertIsNone(self.create(admin, "full", 1))
        value = b"x" * 100_000
        batch = record_batch([value], int(time.time() * 1000))
        with Connection(self.node.bootstrap) as conn:
            for _ in range(10):
                answer = conn.produce(3, -1, "spare", {0: batch})[("spare", 0)]
                self.assertEqual(answer["error"], 0)
            acked, error = 0, 0
            for _ in range(60):  # 6 MB into 4 MB
                answer = conn.produce(3, -1, "full", {0: batch})[("full", 0)]
                error = answer["error"]
                if error != 0:
                    break
                self.assertEqual(answer["base_offset"], acked)
                acked += 1
            self.assertEqual(error, KAFKA_STORAGE_ERROR, "a full disk is a retriable error")
            self.assertGreater(acked, 5)
            # Nothing acknowledged is damaged, nothing half written is visible.
            self.assertEqual(self.high_watermark(conn, "full"), acked)
            self.assertEqual(conn.produce(3, -1, "full", {0: batch})[("full", 0)]["error"],
                             KAFKA_STORAGE_ERROR, "still full")
        self.assertIn("No space left on device", self.node.log())

        # Room made: the same partition takes records again.
        admin.delete_topics(["spare"], operation_timeout=20)["spare"].result(timeout=30)
        wait_until(lambda: not self.live_dirs("spare") and not any(
            d.startswith("spare-0.") for d in os.listdir(self.logs)), 30, "spare's files removed")
        with Connection(self.node.bootstrap) as conn:
            answer = conn.produce(3, -1, "full", {0: batch})[("full", 0)]
            self.assertEqual(answer["error"], 0)
            self.assertEqual(answer["base_offset"], acked)

        self.assertEqual(self.node.stop(), 0, self.node.log()[-3000:])
        self.node.start()
        with Connection(self.node.bootstrap) as conn:
            wait_until(lambda: conn.fetch("full", 0, 0, max_bytes=1)[0] == 0, 30, "full served")
            self.assertEqual(self.high_watermark(conn, "full"), acked + 1)
            error, _, records = conn.fetch("full", 0, acked, max_bytes=1 << 20)
            self.assertEqual(error, 0)
            self.assertIn(value, records)


if __name__ == "__main__":
    unittest.main()
