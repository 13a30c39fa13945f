"""A disk failing under a running node, end to end: storaged's test hook (RUNNEL_TEST_FAULTS_FILE,
storaged/fault_file.h, built into test builds only) makes the real daemon's fsyncs or writes
fail when the test says, and the test checks what Kafka clients see.

  - A failed fsync takes the partition offline (after it the page cache and the disk may
    disagree, so no retry can be trusted): the produce that needed it fails with a retriable
    error, Metadata gives the partition no leader, the other partitions serve on, and after
    a restart every record acknowledged before is read back and the partition takes appends
    again.
  - A full disk (ENOSPC on write) fails appends with a retriable error and changes nothing;
    once there is room, appends go on from where they were.
"""
import os
import tempfile
import time
import unittest

from harness import wait_until
from kafka_clients import RunnelTarget
from kafka_wire import Connection, batch_headers, record_batch

KAFKA_STORAGE_ERROR = 56
# What a producer may be told for a partition that is offline here: all retriable.
OFFLINE_ERRORS = {KAFKA_STORAGE_ERROR, 5, 6}  # + LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER


class DiskFaultTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="runnel-faults-")
        self.faults = os.path.join(self.tmp.name, "faults")
        old = os.environ.get("RUNNEL_TEST_FAULTS_FILE")
        os.environ["RUNNEL_TEST_FAULTS_FILE"] = self.faults
        try:
            self.target = RunnelTarget()
        finally:
            if old is None:
                del os.environ["RUNNEL_TEST_FAULTS_FILE"]
            else:
                os.environ["RUNNEL_TEST_FAULTS_FILE"] = old
        if "file faults are read from" not in self.target.node.log():
            self.target.cleanup()
            self.skipTest("this build's storaged has no RUNNEL_TEST_FAULTS_FILE hook "
                          "(a Release build)")
        self.now = int(time.time() * 1000)

    def tearDown(self):
        self.target.cleanup()
        self.tmp.cleanup()

    def set_faults(self, text):
        with open(self.faults + ".new", "w") as f:
            f.write(text)
        os.replace(self.faults + ".new", self.faults)
        time.sleep(0.2)  # storaged looks at the file every 50 ms

    def produce(self, topic, value, partition=0):
        with Connection(self.target.bootstrap) as conn:
            answer = conn.produce(3, -1, topic, {partition: record_batch([value], self.now)})
        return answer[(topic, partition)]

    def fetch_values_offsets(self, topic):
        with Connection(self.target.bootstrap) as conn:
            error, high_watermark, records = conn.fetch(topic, 0, 0)
        self.assertEqual(error, 0)
        return high_watermark, [h["base_offset"] for h in batch_headers(records)], records

    def leader_of(self, topic):
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.target.bootstrap})
        return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader

    def test_a_failed_fsync_takes_the_partition_offline_and_keeps_what_was_acknowledged(self):
        # flush.messages=1: every append is fsynced before it is acknowledged.
        self.target.create_topic("doomed", 1, {"flush.messages": "1"})
        self.target.create_topic("healthy", 1)
        for i in range(5):
            self.assertEqual(self.produce("doomed", b"kept-%d" % i)["error"], 0)
            self.assertEqual(self.produce("healthy", b"h-%d" % i)["error"], 0)

        self.set_faults("sync EIO /doomed-0/\n")
        failed = self.produce("doomed", b"never acknowledged")
        self.assertEqual(failed["error"], KAFKA_STORAGE_ERROR, failed)
        wait_until(lambda: self.leader_of("doomed") == -1, 30, "doomed-0 without a leader")
        self.assertIn(self.produce("doomed", b"refused")["error"], OFFLINE_ERRORS)
        self.assertIn("doomed-0] offline until storaged restarts", self.target.node.log())
        # The rest of the node serves on.
        self.assertEqual(self.leader_of("healthy"), 1)
        self.assertEqual(self.produce("healthy", b"h-5")["error"], 0)
        self.assertEqual(self.fetch_values_offsets("healthy")[:2], (6, list(range(6))))

        # A restart recovers the partition from its last good flush: all five acknowledged
        # records are there (the one that failed may be too: it was written, not promised).
        self.set_faults("")
        self.assertEqual(self.target.node.stop(), 0)
        self.target.node.start()
        wait_until(lambda: self.leader_of("doomed") == 1, 60, "doomed-0 led again")
        high_watermark, offsets, records = self.fetch_values_offsets("doomed")
        self.assertIn(high_watermark, (5, 6))
        self.assertEqual(offsets, list(range(high_watermark)))
        for i in range(5):
            self.assertIn(b"kept-%d" % i, records)
        answer = self.produce("doomed", b"after")
        self.assertEqual((answer["error"], answer["base_offset"]), (0, high_watermark))

    def test_a_full_disk_fails_appends_until_there_is_room(self):
        self.target.create_topic("full", 1)
        for i in range(3):
            self.assertEqual(self.produce("full", b"before-%d" % i)["error"], 0)
        self.set_faults("write ENOSPC /full-0/\n")
        for _ in range(3):
            self.assertEqual(self.produce("full", b"no room")["error"], KAFKA_STORAGE_ERROR)
        # Still led here: a full disk is not a broken one.
        self.assertEqual(self.leader_of("full"), 1)
        self.set_faults("")
        answer = self.produce("full", b"room again")
        self.assertEqual((answer["error"], answer["base_offset"]), (0, 3))
        high_watermark, offsets, records = self.fetch_values_offsets("full")
        self.assertEqual((high_watermark, offsets), (4, [0, 1, 2, 3]))
        self.assertNotIn(b"no room", records)


if __name__ == "__main__":
    unittest.main()
