"""KIP-848 consumer groups driven by hand-built ConsumerGroupHeartbeat and
ConsumerGroupDescribe requests (librdkafka 2.0 has no client side for the new protocol).

Checked: three members join a 6-partition topic and converge to 2 partitions each, disjoint,
all 6 covered, never a partition owned by two members at once; one leaves and the other two
converge to 3 + 3; ConsumerGroupDescribe shows the group Stable with those assignments; the
errors a client meets (unknown member, fenced epoch, unknown group, bad join); the group,
rebuilt from __consumer_offsets after a node restart, is the same and its members carry on.
"""
import time
import unittest
import uuid

from harness import wait_until
from kafka_clients import RunnelTarget
from kafka_wire import ApiWriter, Connection

FIND_COORDINATOR = 10
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69

NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
FENCED_MEMBER_EPOCH = 110

TOPIC = "kip848-t"


class Conn(Connection):
    """The KIP-848 requests, by hand."""

    def find_coordinator(self, group):
        """FindCoordinator v3: (error, node id, host, port)."""
        w = ApiWriter(True).string(group).i8(0).tags()
        r = self.call(FIND_COORDINATOR, 3, w)
        r.i32()
        error = r.i16()
        r.string()
        node, host, port = r.i32(), r.string(), r.i32()
        return error, node, host, port

    def heartbeat(self, group, member_id, epoch, topics=None, owned=None, rebalance_timeout=-1,
                  instance_id=None, assignor=None, version=1):
        """ConsumerGroupHeartbeat: a dict of the answer; `assignment` is None or
        {topic id bytes: set of partitions}."""
        w = ApiWriter(True).string(group).string(member_id).i32(epoch).string(instance_id)
        w.string(None).i32(rebalance_timeout)  # rack id
        w.array(topics, lambda w, t: w.string(t))
        if version >= 1:
            w.string(None)  # regex
        w.string(assignor)

        def tp(w, item):
            tid, parts = item
            w.uuid(tid)
            w.array(sorted(parts), lambda w, p: w.i32(p))
            w.tags()
        w.array(None if owned is None else sorted(owned.items()), tp)
        w.tags()
        r = self.call(CONSUMER_GROUP_HEARTBEAT, version, w)
        out = {"throttle": r.i32(), "error": r.i16(), "message": r.string(),
               "member_id": r.string(), "epoch": r.i32(), "interval": r.i32()}
        present = r.i8()
        out["assignment"] = None
        if present >= 0:
            def rtp(r):
                tid = r.uuid()
                parts = r.array(lambda r: r.i32())
                r.tags()
                return tid, set(parts)
            out["assignment"] = dict(r.array(rtp))
            r.tags()
        r.tags()
        assert r.done(), "bytes left in a ConsumerGroupHeartbeat answer"
        return out

    def describe(self, groups, version=1):
        w = ApiWriter(True).array(groups, lambda w, g: w.string(g)).i8(0).tags()
        r = self.call(CONSUMER_GROUP_DESCRIBE, version, w)
        r.i32()

        def assignment(r):
            def rtp(r):
                r.uuid()  # topic id
                name = r.string()
                parts = r.array(lambda r: r.i32())
                r.tags()
                return name, set(parts)
            a = dict(r.array(rtp))
            r.tags()
            return a

        def member(r):
            m = {"member_id": r.string(), "instance_id": r.string(), "rack_id": r.string(),
                 "epoch": r.i32(), "client_id": r.string(), "client_host": r.string(),
                 "topics": r.array(lambda r: r.string()), "regex": r.string()}
            m["assignment"] = assignment(r)
            m["target"] = assignment(r)
            if version >= 1:
                m["type"] = r.i8()  # KIP-1099: 1, a consumer-protocol member
            r.tags()
            return m

        def group(r):
            g = {"error": r.i16(), "message": r.string(), "group_id": r.string(),
                 "state": r.string(), "epoch": r.i32(), "assignment_epoch": r.i32(),
                 "assignor": r.string()}
            g["members"] = r.array(member)
            g["ops"] = r.i32()
            r.tags()
            return g
        out = r.array(group)
        r.tags()
        assert r.done(), "bytes left in a ConsumerGroupDescribe answer"
        return out


class Member:
    """One KIP-848 consumer: it owns what the coordinator last gave it."""

    def __init__(self, conn, group, topics=(TOPIC,)):
        self.conn = conn
        self.group = group
        self.topics = list(topics)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned = {}  # topic id -> set of partitions

    def beat(self):
        if self.epoch == 0:
            a = self.conn.heartbeat(self.group, self.member_id, 0, topics=self.topics, owned={},
                                    rebalance_timeout=30000)
        else:
            a = self.conn.heartbeat(self.group, self.member_id, self.epoch, owned=self.owned)
        if a["error"] == NONE:
            self.epoch = a["epoch"]
            if a["assignment"] is not None:
                self.owned = {t: p for t, p in a["assignment"].items() if p}
        return a

    def leave(self):
        a = self.conn.heartbeat(self.group, self.member_id, -1)
        self.owned = {}
        return a

    def partitions(self):
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def wait_coordinator(conn, group):
    """Waits until `group`'s coordinator is found and its shard has loaded."""
    def ready():
        if conn.find_coordinator(group)[0] != NONE:
            return False
        [d] = conn.describe([group])
        return d["error"] not in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                                  NOT_COORDINATOR)
    wait_until(ready, 60, f"a coordinator for {group}", interval=0.2)


def converge(test, members, want, timeout=30):
    """Heartbeats every member in turn until each owns `want` partitions, checking after every
    answer that no partition is owned by two members; returns the rounds it took."""
    deadline = time.time() + timeout
    rounds = 0
    while time.time() < deadline:
        rounds += 1
        for m in members:
            a = m.beat()
            test.assertEqual(a["error"], NONE, a)
            test.assertEqual(a["interval"], 5000)  # group.consumer.heartbeat.interval.ms
            seen = set()
            for x in members:
                test.assertFalse(seen & x.partitions(), "a partition owned by two members")
                seen |= x.partitions()
        if all(len(m.partitions()) == want for m in members):
            return rounds
        time.sleep(0.05)
    test.fail(f"no convergence: {[sorted(m.partitions()) for m in members]}")


class Kip848Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = RunnelTarget({"offsets.topic.num.partitions": "4"})
        cls.target.create_topic(TOPIC, 6)

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    def setUp(self):
        self.conn = Conn(self.target.bootstrap)

    def tearDown(self):
        self.conn.close()

    def test_api_versions(self):
        v = self.conn.api_versions()
        self.assertEqual(v[CONSUMER_GROUP_HEARTBEAT], (0, 1))
        self.assertEqual(v[CONSUMER_GROUP_DESCRIBE], (0, 1))

    def test_three_members_converge_then_one_leaves(self):
        group = "kip848-group"
        wait_coordinator(self.conn, group)
        members = [Member(self.conn, group) for _ in range(3)]
        for m in members:
            a = m.beat()
            self.assertEqual(a["error"], NONE, a)
            self.assertEqual(a["member_id"], m.member_id)
        converge(self, members, 2)
        union = set()
        for m in members:
            union |= m.partitions()
        self.assertEqual(len(union), 6)
        self.assertEqual(len({t for t, _ in union}), 1)

        [d] = self.conn.describe([group])
        self.assertEqual(d["error"], NONE)
        self.assertEqual(d["state"], "Stable")
        self.assertEqual(d["assignor"], "uniform")
        self.assertEqual(d["epoch"], d["assignment_epoch"])
        self.assertEqual(len(d["members"]), 3)
        for dm in d["members"]:
            self.assertEqual(dm["topics"], [TOPIC])
            self.assertEqual(dm["epoch"], d["epoch"])
            self.assertEqual(dm["assignment"], dm["target"])
            self.assertEqual(len(dm["assignment"][TOPIC]), 2)
            self.assertTrue(dm["client_host"].startswith("/"))
            self.assertEqual(dm["type"], 1)
        [v0] = self.conn.describe([group], version=0)  # v0: the same without member types
        self.assertEqual([m["member_id"] for m in v0["members"]],
                         [m["member_id"] for m in d["members"]])

        gone = members.pop()
        a = gone.leave()
        self.assertEqual(a["error"], NONE, a)
        self.assertEqual(a["epoch"], -1)
        converge(self, members, 3)
        union = members[0].partitions() | members[1].partitions()
        self.assertEqual(len(union), 6)

        [d] = self.conn.describe([group])
        self.assertEqual(d["state"], "Stable")
        self.assertEqual(sorted(m["member_id"] for m in d["members"]),
                         sorted(m.member_id for m in members))
        for dm in d["members"]:
            self.assertEqual(len(dm["assignment"][TOPIC]), 3)

        # The left member is gone; a stale epoch is fenced.
        a = self.conn.heartbeat(group, gone.member_id, 5, owned={})
        self.assertEqual(a["error"], UNKNOWN_MEMBER_ID)
        a = self.conn.heartbeat(group, members[0].member_id, members[0].epoch + 5, owned={})
        self.assertEqual(a["error"], FENCED_MEMBER_EPOCH)
        for m in members:
            self.assertEqual(m.leave()["error"], NONE)
        [d] = self.conn.describe([group])
        self.assertEqual(d["state"], "Empty")

    def test_errors(self):
        group = "kip848-errors"
        wait_coordinator(self.conn, group)
        # Heartbeat of a group that does not exist.
        a = self.conn.heartbeat(group, "nobody", 3, owned={})
        self.assertEqual(a["error"], GROUP_ID_NOT_FOUND)
        # v1: the client makes the member id; a join without one is refused.
        a = self.conn.heartbeat(group, "", 0, topics=[TOPIC], owned={}, rebalance_timeout=1000)
        self.assertEqual(a["error"], INVALID_REQUEST)
        # v0: the coordinator makes one.
        a = self.conn.heartbeat(group, "", 0, topics=[TOPIC], owned={}, rebalance_timeout=1000,
                                version=0)
        self.assertEqual(a["error"], NONE, a)
        self.assertTrue(a["member_id"])
        self.assertEqual(self.conn.heartbeat(group, a["member_id"], -1, version=0)["error"], NONE)
        # A join without a rebalance timeout.
        a = self.conn.heartbeat(group, "m", 0, topics=[TOPIC], owned={})
        self.assertEqual(a["error"], INVALID_REQUEST)
        [d] = self.conn.describe(["kip848-nope"])
        self.assertEqual(d["error"], GROUP_ID_NOT_FOUND)


class Kip848RestartTest(unittest.TestCase):
    """The group is rebuilt from its records in __consumer_offsets after a node restart."""

    def test_group_survives_a_node_restart(self):
        target = RunnelTarget({"offsets.topic.num.partitions": "2"})
        try:
            target.create_topic(TOPIC, 6)
            conn = Conn(target.bootstrap)
            group = "kip848-restart"
            wait_coordinator(conn, group)
            members = [Member(conn, group) for _ in range(2)]
            for m in members:
                self.assertEqual(m.beat()["error"], NONE)
            converge(self, members, 3)
            [before] = conn.describe([group])
            conn.close()

            target.node.stop()
            target.node.start()
            conn = Conn(target.bootstrap)
            wait_coordinator(conn, group)
            [after] = conn.describe([group])
            self.assertEqual(after["error"], NONE, after)
            for key in ("state", "epoch", "assignment_epoch", "assignor"):
                self.assertEqual(after[key], before[key], key)
            self.assertEqual(sorted((m["member_id"], m["epoch"], str(m["assignment"]))
                                    for m in after["members"]),
                             sorted((m["member_id"], m["epoch"], str(m["assignment"]))
                                    for m in before["members"]))
            # The members carry on at their epochs with their partitions.
            for m in members:
                m.conn = conn
                a = m.beat()
                self.assertEqual(a["error"], NONE, a)
                self.assertEqual(len(m.partitions()), 3)
            conn.close()
        finally:
            target.cleanup()


if __name__ == "__main__":
    unittest.main()
