"""The long poll: a librdkafka consumer (fetch.wait.max.ms=5000) waits on an empty
partition; a record produced 1 s after the wait began arrives within 1.2 s of that start,
and brokerd's CPU stays near idle while the fetch waits (no busy polling).

Its own CTest entry, run serially: a latency bound is only meaningful on a machine that is
not also running the other tests.
"""
import os
import threading
import time
import unittest

from kafka_clients import skip_on_mock, start_target


def cpu_ticks(pid):
    """utime + stime of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class LongPollTest(unittest.TestCase):
    """A librdkafka consumer with fetch.wait.max.ms=5000 waits on an empty partition; a
    record produced 1 s after it started waiting arrives within 1.2 s of that start."""

    def setUp(self):
        self.target = start_target()

    def tearDown(self):
        self.target.cleanup()

    @skip_on_mock("the mock answers an empty fetch only after max wait, new data or not")
    def test_record_arrives_while_the_fetch_waits(self):
        from confluent_kafka import Consumer, Producer, TopicPartition
        topic = "long-poll"
        bootstrap = self.target.bootstrap
        self.target.create_topic(topic, 1)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
        # Connect and learn the topic's leader before the clock starts.
        producer.list_topics(topic, timeout=10)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-long-poll",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 5000,
                             "fetch.min.bytes": 1, "enable.partition.eof": False})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            # Let the consumer reach its first long fetch on the empty partition.
            self.assertIsNone(consumer.poll(1.5))
            brokerd = self.target.brokerd_pid()
            ticks_before = cpu_ticks(brokerd) if brokerd else None
            received = {}

            def consume():
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    msg = consumer.poll(0.05)
                    if msg is not None and not msg.error():
                        received["at"] = time.monotonic()
                        received["value"] = msg.value()
                        return

            start = time.monotonic()
            reader = threading.Thread(target=consume)
            reader.start()
            time.sleep(1.0)
            if brokerd:
                idle_ticks = cpu_ticks(brokerd) - ticks_before
            producer.produce(topic, value=b"wake up", partition=0)
            producer.flush(10)
            reader.join(15)
            self.assertEqual(received.get("value"), b"wake up")
            elapsed = received["at"] - start
            self.assertLess(elapsed, 1.2,
                            f"the record arrived {elapsed:.3f} s after the wait began")
            if brokerd:
                # Over the second before the record: a busy-polling broker burns a core, a
                # long poll sleeps in epoll.
                hz = os.sysconf("SC_CLK_TCK")
                self.assertLess(
                    idle_ticks / hz, 0.1,
                    f"brokerd used {idle_ticks / hz:.2f} s of CPU while the fetch waited")
        finally:
            consumer.close()


if __name__ == "__main__":
    unittest.main()
