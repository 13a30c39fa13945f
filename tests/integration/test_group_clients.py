"""Consumer groups with other clients than librdkafka's group consumer: python3-kafka's
KafkaConsumer and its KafkaAdminClient (list, describe, offsets, delete groups), KafkaJS's
group consumer (kafkajs_group.js) and kcat's balanced consumer (-G).

Each client reads a 3-partition topic of 30 records in a group of its own, committing as it
goes: every record is read once and the committed offsets are the end of each partition.
kafka-python's admin sees the groups, their members and assignments while a member is in the
group, refuses to delete a non-empty group (NON_EMPTY_GROUP) and deletes an empty one.
"""
import json
import os
import subprocess
import threading
import time
import unittest

from harness import wait_until
from kafka_clients import HERE, IS_MOCK, ensure_kafkajs, start_target

TOPIC = "gc-topic"
PARTITIONS = 3
PER_PARTITION = 10
NODE_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "8",
}
NON_EMPTY_GROUP = 68
ALL = sorted((p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION))


def bounded(fn, timeout=30, what="admin call"):
    """Runs fn in a thread and waits at most `timeout` s: kafka-python's admin client waits for
    its futures with no deadline of its own."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(f"{what} did not answer within {timeout}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


@unittest.skipIf(IS_MOCK, "librdkafka's mock cluster has no group admin APIs")
class GroupClientsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from confluent_kafka import Producer
        cls.target = start_target(NODE_CONFIG)
        cls.bootstrap = cls.target.bootstrap
        cls.target.create_topic(TOPIC, PARTITIONS)
        p = Producer({"bootstrap.servers": cls.bootstrap})
        for i in range(PARTITIONS * PER_PARTITION):
            p.produce(TOPIC, value=f"v{i}".encode(), partition=i % PARTITIONS)
        assert p.flush(30) == 0
        from kafka import KafkaAdminClient
        cls.admin = KafkaAdminClient(bootstrap_servers=cls.bootstrap, client_id="it-admin",
                                     request_timeout_ms=30000)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.admin.close()
        finally:
            cls.target.cleanup()

    # ---- admin helpers (retrying while the coordinator loads) -----------------------------

    def admin_call(self, fn, what):
        box = {}

        def attempt():
            box["v"] = bounded(fn, 30, what)
            return True
        wait_until(attempt, 60, what, interval=0.2)
        return box["v"]

    def describe(self, group):
        return self.admin_call(lambda: self.admin.describe_consumer_groups([group])[0],
                               f"describe {group}")

    def groups(self):
        return self.admin_call(self.admin.list_consumer_groups, "list groups")

    def offsets(self, group):
        got = self.admin_call(lambda: self.admin.list_consumer_group_offsets(group),
                              f"offsets of {group}")
        return {tp.partition: om.offset for tp, om in got.items() if tp.topic == TOPIC}

    def delete(self, group):
        (gid, error), = bounded(lambda: self.admin.delete_consumer_groups([group]), 30,
                                f"delete {group}")
        self.assertEqual(gid, group)
        return error.errno

    def check_described(self, group, protocol, client_id, members=1):
        """The group is Stable; its members' assignments split every partition of TOPIC."""
        wait_until(lambda: self.describe(group).state == "Stable" and
                   len(self.describe(group).members) == members, 30,
                   f"{group} Stable with {members} members")
        g = self.describe(group)
        self.assertEqual(g.error_code, 0)
        self.assertEqual(g.group, group)
        self.assertEqual(g.protocol_type, "consumer")
        self.assertEqual(g.protocol, protocol)
        self.assertEqual(len(g.members), members, g)
        assigned = []
        for m in g.members:
            self.assertTrue(m.member_id.startswith(client_id), m.member_id)
            self.assertEqual(m.client_id, client_id)
            self.assertEqual(list(m.member_metadata.subscription), [TOPIC])
            for t, ps in m.member_assignment.assignment:
                self.assertEqual(t, TOPIC)
                self.assertTrue(ps, f"a member with no partitions: {g}")
                assigned += ps
        self.assertEqual(sorted(assigned), list(range(PARTITIONS)), g)
        self.assertEqual(len({m.member_id for m in g.members}), members)
        self.assertIn((group, "consumer"), self.groups())
        self.assertEqual(self.delete(group), NON_EMPTY_GROUP)

    def check_empty_then_delete(self, group):
        wait_until(lambda: self.describe(group).state == "Empty", 30, f"{group} Empty")
        self.assertEqual(self.describe(group).members, [])
        # An empty group keeps its offsets until deleted.
        self.assertEqual(self.offsets(group), {p: PER_PARTITION for p in range(PARTITIONS)})
        self.assertIn((group, "consumer"), self.groups())
        self.assertEqual(self.delete(group), 0)
        self.assertNotIn(group, [g for g, _ in self.groups()])
        self.assertEqual(self.offsets(group), {})
        self.assertEqual(self.describe(group).state, "Dead")

    # ---- tests ----------------------------------------------------------------------------

    def test_kafka_python_group_consumers_and_admin(self):
        from kafka import KafkaConsumer
        group = "gc-kafka-python"

        def consumer():
            return KafkaConsumer(TOPIC, bootstrap_servers=self.bootstrap, group_id=group,
                                 client_id="kp-it", auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=10000,
                                 heartbeat_interval_ms=500, fetch_max_wait_ms=100)
        cs = [consumer(), consumer()]
        # Each member polls in a thread of its own: kafka-python's poll() blocks in JoinGroup
        # until every member has rejoined, so one thread cannot drive two members.
        got = []
        lock = threading.Lock()
        stop = threading.Event()
        commit_errors = []

        def run(c):
            while not stop.is_set():
                for tp, recs in c.poll(timeout_ms=100).items():
                    with lock:
                        got.extend((tp.partition, r.offset) for r in recs)
                    try:
                        c.commit()  # after processing
                    except Exception as e:  # a failed commit: at-least-once may read again
                        commit_errors.append(repr(e))
        threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in cs]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(got) >= len(ALL), 60, "kafka-python reading every record")
            with lock:
                if commit_errors:  # records of a failed commit may be read twice
                    self.assertEqual(sorted(set(got)), ALL, commit_errors)
                else:
                    self.assertEqual(sorted(got), ALL)
            wait_until(lambda: self.offsets(group) == {p: PER_PARTITION for p in
                                                       range(PARTITIONS)},
                       30, f"offsets of {group} committed")
            self.check_described(group, "range", "kp-it", members=2)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
            for c in cs:
                c.close()
        self.check_empty_then_delete(group)

    def test_kafkajs_group_consumer(self):
        node_path = ensure_kafkajs()
        group = "gc-kafkajs"
        env = dict(os.environ, NODE_PATH=node_path)
        proc = subprocess.Popen(["node", os.path.join(HERE, "kafkajs_group.js"), self.bootstrap,
                                 TOPIC, group, str(len(ALL))], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        events = []

        def read():
            for line in proc.stdout:
                if line.strip():
                    events.append(json.loads(line))
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            try:
                wait_until(lambda: any(e["ev"] == "done" for e in list(events)), 90,
                           "KafkaJS reading every record")
            except TimeoutError as e:
                proc.kill()
                proc.wait(timeout=10)
                self.fail(f"{e}: {[x for x in events if x['ev'] != 'rec']}\n"
                          f"{proc.stderr.read()[-3000:]}")
            got = [(e["p"], e["o"]) for e in list(events) if e["ev"] == "rec"]
            self.assertEqual(sorted(got), ALL)
            self.assertEqual(self.offsets(group), {p: PER_PARTITION for p in range(PARTITIONS)})
            self.check_described(group, "RoundRobinAssigner", "runnel-it-group")
            proc.stdin.close()  # KafkaJS disconnects: leaves the group
            proc.wait(timeout=30)
            reader.join(timeout=10)
            self.assertEqual(proc.returncode, 0, proc.stderr.read()[-3000:])
            self.assertEqual(events[-1]["ev"], "closed")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            proc.stdout.close()
            proc.stderr.close()
        self.check_empty_then_delete(group)

    def test_kcat_balanced_consumer(self):
        group = "gc-kcat"
        out = subprocess.run(["kcat", "-b", self.bootstrap, "-G", group, TOPIC, "-c",
                              str(len(ALL)), "-J", "-q", "-X", "auto.offset.reset=earliest",
                              "-X", "heartbeat.interval.ms=500"],
                             capture_output=True, text=True, timeout=90)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = sorted((j["partition"], j["offset"]) for j in
                     (json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")))
        self.assertEqual(got, ALL)
        # kcat's consumer commits (auto commit) when it closes.
        self.check_empty_then_delete(group)


if __name__ == "__main__":
    unittest.main()
