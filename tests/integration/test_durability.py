"""Nothing acknowledged is lost: 1,000,000 records produced with acks=all and read back
(count, checksum, no duplicate, no gap); then produce runs interrupted by a SIGTERM of the
whole node, a kill -9 of storaged and a kill -9 of brokerd (the supervisor restarts them),
after which every record whose delivery report said success is still there. The producer
is librdkafka (rdkafka_client.cc seq-produce) without idempotence and with retries, so
duplicates are allowed after a restart (they are counted) but gaps are not.

Each record's value starts with its sequence number; seq-consume checks every value's
bytes against its number. RUNNEL_DURABILITY_RECORDS overrides the big run's size; on the
mock it is smaller, as the mock keeps at most 5 MiB or 100,000 batches a partition.
"""
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from harness import BIN_DIR
from kafka_clients import IS_MOCK, read_seqs, seq_summary, skip_on_mock, start_target

BIG_RUN = int(os.environ.get("RUNNEL_DURABILITY_RECORDS", "300000" if IS_MOCK else "1000000"))
RESTART_RUN = 150000
PARTITIONS = 4
VALUE_BYTES = 32

PRODUCER = {
    "acks": "all",
    "enable.idempotence": "false",
    "retries": "2147483647",
    "retry.backoff.ms": "100",
    "message.timeout.ms": "120000",
    "linger.ms": "5",
    "reconnect.backoff.max.ms": "500",
}


class DurabilityTest(unittest.TestCase):
    def setUp(self):
        self.target = start_target()
        self.tmp = tempfile.mkdtemp(prefix="rnl-dur-", dir="/tmp")

    def tearDown(self):
        try:
            self.target.cleanup()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def client(self, *args):
        return [os.path.join(BIN_DIR, "rdkafka_client"), "c", *args]

    def start_producer(self, topic, count, progress_every):
        props = dict(PRODUCER, **{"test.timeout.ms": "150000",
                                  "test.progress.every": str(progress_every)})
        acked_path = os.path.join(self.tmp, f"{topic}.acked")
        proc = subprocess.Popen(
            self.client("seq-produce", self.target.bootstrap, topic, str(PARTITIONS), str(count),
                        str(VALUE_BYTES), acked_path, *[f"{k}={v}" for k, v in props.items()]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        progress = {"acked": 0, "done": None}
        stderr = []

        def read_stdout():
            for line in proc.stdout:
                if line.startswith("acked "):
                    progress["acked"] = int(line.split()[1])
                elif line.startswith("done "):
                    progress["done"] = seq_summary(line)

        def read_stderr():  # librdkafka logs while the broker is away; keep only the tail
            for line in proc.stderr:
                stderr.append(line)
                del stderr[:-50]

        threads = [threading.Thread(target=read_stdout), threading.Thread(target=read_stderr)]
        for t in threads:
            t.start()
        return proc, progress, threads, acked_path, stderr

    def finish_producer(self, proc, threads, timeout=200):
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise
        finally:
            for t in threads:
                t.join(10)

    def consume_all(self, topic):
        seq_path = os.path.join(self.tmp, f"{topic}.consumed")
        out = subprocess.run(self.client("seq-consume", self.target.bootstrap, topic,
                                         str(PARTITIONS), seq_path, "test.timeout.ms=150000"),
                             capture_output=True, text=True, timeout=200)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        done = seq_summary(out.stdout.strip().splitlines()[-1])
        self.assertEqual(done["corrupt"], 0, "values that do not match their sequence number")
        self.assertEqual(done["log_start"], 0, "records gone from the start of the log")
        return done, read_seqs(seq_path)

    def test_million_records_acks_all(self):
        topic = "million"
        self.target.create_topic(topic, PARTITIONS)
        proc, progress, threads, acked_path, stderr = self.start_producer(topic, BIG_RUN, 100000)
        self.finish_producer(proc, threads)
        produced = progress["done"]
        self.assertIsNotNone(produced, "".join(stderr))
        self.assertEqual(proc.returncode, 0, "".join(stderr))
        self.assertEqual((produced["acked"], produced["failed"], produced["refused"]),
                         (BIG_RUN, 0, 0), produced)

        consumed, seqs = self.consume_all(topic)
        self.assertEqual(consumed["consumed"], BIG_RUN)
        self.assertEqual(consumed["checksum"], produced["checksum"])
        seen = bytearray(BIG_RUN)
        duplicates = out_of_range = 0
        for s in seqs:
            if s >= BIG_RUN:
                out_of_range += 1
            elif seen[s]:
                duplicates += 1
            else:
                seen[s] = 1
        self.assertEqual((duplicates, out_of_range), (0, 0))
        self.assertEqual(seen.count(0), 0, "gaps")

    def interrupted_run(self, interrupt, what):
        """Produces RESTART_RUN records; `interrupt` runs once a third is acknowledged.
        Then every acknowledged record must be readable."""
        topic = "interrupted"
        self.target.create_topic(topic, PARTITIONS)
        proc, progress, threads, acked_path, stderr = self.start_producer(topic, RESTART_RUN, 1000)
        deadline = time.monotonic() + 120
        while progress["acked"] < RESTART_RUN // 3 and proc.poll() is None:
            self.assertLess(time.monotonic(), deadline, f"acks stalled at {progress['acked']}")
            time.sleep(0.01)
        self.assertIsNone(proc.poll(), "the producer finished before the interruption: "
                          "make RESTART_RUN bigger")
        acked_at_interrupt = progress["acked"]
        interrupt()
        self.finish_producer(proc, threads)
        produced = progress["done"]
        self.assertIsNotNone(produced, "".join(stderr))
        acked = read_seqs(acked_path)
        self.assertEqual(len(acked), produced["acked"])
        self.assertGreater(len(acked), acked_at_interrupt, f"nothing acknowledged after {what}")

        consumed, seqs = self.consume_all(topic)
        counts = bytearray(RESTART_RUN)
        for s in seqs:
            self.assertLess(s, RESTART_RUN)
            counts[s] = min(counts[s] + 1, 255)
        lost = [s for s in acked if counts[s] == 0]
        duplicates = sum(c - 1 for c in counts if c > 1)
        print(f"\n{what}: acknowledged {len(acked)} of {RESTART_RUN}, read {len(seqs)}, "
              f"duplicates {duplicates}; producer: {produced}")
        self.assertEqual(lost[:20], [], f"{len(lost)} acknowledged records lost after {what}")

    @skip_on_mock("the mock cannot be restarted")
    def test_node_sigterm_mid_produce(self):
        node = self.target.node

        def restart():
            self.assertEqual(node.stop(), 0)
            node.start()

        self.interrupted_run(restart, "a SIGTERM restart of the node")

    @skip_on_mock("the mock has no storaged")
    def test_storaged_kill9_mid_produce(self):
        node = self.target.node

        def kill():
            pid = node.kill_role("storaged")
            node.wait_role_restarted("storaged", pid)

        self.interrupted_run(kill, "kill -9 of storaged")
        # brokerd's append socket broke with the old storaged and was made again to the new.
        log = node.log()
        self.assertIn("appends go through gRPC until the append socket is back", log)
        self.assertGreaterEqual(log.count("appends go to storaged through"), 2, log[-4000:])

    @skip_on_mock("the mock has no brokerd")
    def test_brokerd_kill9_mid_produce(self):
        node = self.target.node

        def kill():
            pid = node.kill_role("brokerd")
            node.wait_role_restarted("brokerd", pid)

        self.interrupted_run(kill, "kill -9 of brokerd")


if __name__ == "__main__":
    unittest.main()
