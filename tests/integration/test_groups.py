"""Classic consumer groups with librdkafka (python3-confluent-kafka), each consumer a process
of its own (group_consumer.py) so that it can be closed or kill -9ed.

Checked: three members of a 6-partition topic get 2 partitions each, none twice; a member
that closes hands its partitions over within the rebalance and one killed hands them over
after session.timeout.ms, with a producer running all along and commits after processing:
no record skipped, and a record read twice only where the first reader had not committed
it (the at-least-once window). Committed offsets survive a consumer restart and a node
restart. cooperative-sticky moves only the partitions a new member needs. A static member
(group.instance.id) killed and restarted within its session timeout gets its partitions
back and the others see no rebalance.

RUNNEL_TEST_TARGET=mock runs what librdkafka's mock cluster can do against it.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

from harness import Node, wait_until
from kafka_clients import IS_MOCK, skip_on_mock, start_target

HERE = os.path.dirname(os.path.abspath(__file__))
SESSION_MS = 6000
# Short heartbeats: members learn of a rebalance quickly (librdkafka's default is 3 s).
FAST = {"session.timeout.ms": str(SESSION_MS), "heartbeat.interval.ms": "500"}
NODE_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
}


class ConsumerProc:
    """One group_consumer.py process and the events it printed."""

    def __init__(self, bootstrap, topic, group, conf=None, name="c", max_records=None,
                 commit_interval_ms=100):
        self.name = name
        opts = {"bootstrap": bootstrap, "topic": topic, "group": group,
                "conf": dict(FAST, **(conf or {})), "commit_interval_ms": commit_interval_ms}
        if max_records is not None:
            opts["max_records"] = max_records
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "group_consumer.py"), json.dumps(opts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events = []
        self.stderr = ""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.err_reader = threading.Thread(target=self._read_err, daemon=True)
        self.err_reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(ev)

    def _read_err(self):
        for line in self.proc.stderr:
            with self.lock:
                self.stderr = (self.stderr + line)[-4000:]

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def owned(self):
        """The partitions this consumer holds now (assign adds, revoke/lost remove; eager
        revokes everything before assigning, so this is right for both protocols)."""
        owned = set()
        for ev in self.snapshot():
            if ev["ev"] == "assign":
                owned |= set(ev["parts"])
            elif ev["ev"] in ("revoke", "lost"):
                owned -= set(ev["parts"])
        return owned

    def records(self):
        return [(ev["p"], ev["o"]) for ev in self.snapshot() if ev["ev"] == "rec"]

    def reads_with_commits(self):
        """[((p, o), read time, time of the accepted commit that covered it or None)]; a
        commit covers a read if it comes before the partition is revoked or lost."""
        out = []
        pending = {}  # partition -> [index in out] not yet covered
        for ev in self.snapshot():
            if ev["ev"] == "rec":
                pending.setdefault(ev["p"], []).append(len(out))
                out.append(((ev["p"], ev["o"]), ev["t"], None))
            elif ev["ev"] == "commit":
                for p, o in ev["offsets"].items():
                    left = []
                    for i in pending.get(int(p), []):
                        if out[i][0][1] < o:
                            out[i] = (out[i][0], out[i][1], ev["t"])
                        else:
                            left.append(i)
                    pending[int(p)] = left
            elif ev["ev"] in ("revoke", "lost"):
                for p in ev["parts"]:
                    pending.pop(p, None)
        return out

    def rebalance_events(self, since=0):
        return [ev for ev in self.snapshot()[since:] if ev["ev"] in ("assign", "revoke", "lost")]

    def alive(self):
        return self.proc.poll() is None

    def describe(self):
        evs = self.snapshot()
        tail = [e for e in evs if e["ev"] != "rec"][-15:]
        return (f"{self.name} (exit {self.proc.poll()}): owned {sorted(self.owned())}, "
                f"{len(self.records())} records, last events {tail}\nstderr: {self.stderr}")

    def close(self, timeout=60):
        """Asks the consumer to commit and leave the group; waits for it to exit."""
        if self.alive():
            try:
                self.proc.stdin.write("close\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        if self.proc.returncode != 0:
            raise AssertionError(f"consumer exited with {self.proc.returncode}: "
                                 f"{self.describe()}")

    def kill(self):
        """kill -9: no commit, no LeaveGroup."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.reader.join(timeout=10)

    def cleanup(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass


class Producer:
    """Produces continuously (round-robin over the partitions) from a thread until stopped;
    keeps what was acknowledged as (partition, offset)."""

    def __init__(self, bootstrap, topic, partitions, per_second=100):
        from confluent_kafka import Producer as P
        self.p = P({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self.topic = topic
        self.partitions = partitions
        self.period = 1.0 / per_second
        self.delivered = set()
        self.errors = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _cb(self, err, msg):
        if err is None:
            self.delivered.add((msg.partition(), msg.offset()))
        else:
            self.errors.append(str(err))

    def _run(self):
        i = 0
        while not self.stop_event.is_set():
            self.p.produce(self.topic, value=f"v{i}".encode(), partition=i % self.partitions,
                           on_delivery=self._cb)
            self.p.poll(0)
            i += 1
            self.stop_event.wait(self.period)
        self.left = self.p.flush(30)

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=60)
        if self.left:
            raise AssertionError(f"{self.left} records not delivered")


def committed_offsets(bootstrap, group, topic, partitions):
    """The group's committed offsets (OffsetFetch, without joining): partition -> offset."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


class GroupTestBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = start_target(NODE_CONFIG)

    @classmethod
    def tearDownClass(cls):
        cls.target.cleanup()

    def setUp(self):
        self.procs = []

    def tearDown(self):
        for c in self.procs:
            c.cleanup()

    def consumer(self, *args, **kwargs):
        c = ConsumerProc(*args, **kwargs)
        self.procs.append(c)
        return c

    def wait_assignment(self, consumers, total, sizes, timeout, what):
        """Waits until the consumers' current assignments are disjoint, cover `total`
        partitions and have the given sizes (sorted); fails with every consumer's state."""
        def balanced():
            owned = [c.owned() for c in consumers]
            union = set().union(*owned)
            return (sum(len(o) for o in owned) == len(union) == total and
                    sorted(len(o) for o in owned) == sorted(sizes))
        try:
            wait_until(balanced, timeout, what, interval=0.1)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n" + "\n".join(c.describe() for c in consumers))


class ClassicGroupTest(GroupTestBase):
    def test_three_members_close_and_kill(self):
        topic, group = "grp-three", "g-three"
        self.target.create_topic(topic, 6)
        bootstrap = self.target.bootstrap
        producer = Producer(bootstrap, topic, 6)
        try:
            cs = [self.consumer(bootstrap, topic, group, name=f"c{i}") for i in range(3)]
            self.wait_assignment(cs, 6, [2, 2, 2], 60, "three members with 2 partitions each")
            wait_until(lambda: all(c.records() for c in cs), 30, "every member consuming")

            # A member that closes leaves the group: the others take its partitions in the
            # rebalance that follows, well before any session timeout would.
            t0 = time.monotonic()
            cs[2].close()
            self.wait_assignment(cs[:2], 6, [3, 3], 30, "two members holding all 6 after close")
            close_s = time.monotonic() - t0

            # A member killed -9 sends nothing: the coordinator notices after the session
            # timeout, then the survivor gets everything.
            wait_until(lambda: len(cs[1].records()) > 0, 30, "c1 consuming")
            t0 = time.monotonic()
            cs[1].kill()
            self.wait_assignment(cs[:1], 6, [6], SESSION_MS / 1000 + 30,
                                 "c0 holding all 6 after kill -9 of c1")
            kill_s = time.monotonic() - t0
            if not IS_MOCK:
                self.assertGreater(kill_s, SESSION_MS / 1000 * 0.8,
                                   "taken over before the session timeout expired")
        finally:
            producer.stop()
        self.assertEqual(producer.errors, [])

        # Everything produced is read; c0 drains what is left.
        delivered = producer.delivered
        def all_read():
            seen = set()
            for c in cs:
                seen.update(c.records())
            return delivered <= seen
        try:
            wait_until(all_read, 60, "every produced record read", interval=0.2)
        except TimeoutError:
            seen = set().union(*(set(c.records()) for c in cs))
            missing = sorted(delivered - seen)
            self.fail(f"{len(missing)} records never read, first {missing[:20]}\n" +
                      "\n".join(c.describe() for c in cs))
        cs[0].close()

        # Read twice only in the at-least-once window: no record is read again after a commit
        # covering it was accepted (CLOCK_MONOTONIC is one clock for every process here).
        reads = {}  # (p, o) -> [(consumer name, read time, time of the commit covering it)]
        for c in cs:
            for rec, t_read, t_commit in c.reads_with_commits():
                reads.setdefault(rec, []).append((c.name, t_read, t_commit))
        dups = {rec: rs for rec, rs in reads.items() if len(rs) > 1}
        bad = []
        for rec, rs in dups.items():
            for name, _, t_commit in rs:
                later = [(n, t) for n, t, _ in rs if t_commit is not None and t > t_commit]
                if later:
                    bad.append((rec, name, later))
        self.assertEqual(bad[:10], [], "records read again after a commit covered them")
        if not IS_MOCK:
            # Kafka accepts commits while a rebalance is being prepared (the revoke callback's
            # commit among them): only the killed member leaves uncommitted records behind.
            # (librdkafka's mock cluster refuses such commits with REBALANCE_IN_PROGRESS.)
            not_c1 = [(rec, rs) for rec, rs in dups.items() if "c1" not in [n for n, _, _ in rs]]
            self.assertEqual(not_c1[:10], [], "duplicates not from the killed member")
        print(f"\n  {len(delivered)} records, {len(dups)} read twice (kill -9 window); "
              f"close rebalance {close_s:.1f}s, kill takeover {kill_s:.1f}s", file=sys.stderr)

    def test_cooperative_sticky_moves_only_what_is_needed(self):
        topic, group = "grp-coop", "g-coop"
        self.target.create_topic(topic, 6)
        bootstrap = self.target.bootstrap
        conf = {"partition.assignment.strategy": "cooperative-sticky"}
        a = self.consumer(bootstrap, topic, group, conf, name="a")
        b = self.consumer(bootstrap, topic, group, conf, name="b")
        self.wait_assignment([a, b], 6, [3, 3], 60, "two cooperative members with 3 each")
        before = {"a": a.owned(), "b": b.owned()}
        marks = {"a": len(a.snapshot()), "b": len(b.snapshot())}

        c = self.consumer(bootstrap, topic, group, conf, name="c")
        self.wait_assignment([a, b, c], 6, [2, 2, 2], 60, "three cooperative members")
        moved = c.owned()
        revoked = set()
        for name, m in (("a", a), ("b", b)):
            after = m.owned()
            self.assertLessEqual(after, before[name], f"{name} got new partitions")
            for ev in m.rebalance_events(marks[name]):
                if ev["ev"] == "assign":
                    self.assertEqual(ev["parts"], [], f"{name} assigned more: {ev}")
                elif ev["ev"] == "lost":
                    self.fail(f"{name} lost partitions: {ev}")
                else:
                    self.assertFalse(revoked & set(ev["parts"]))
                    revoked |= set(ev["parts"])
            self.assertEqual(before[name] - after, {p for p in before[name] if p in revoked})
        self.assertEqual(revoked, moved, "revoked partitions are exactly the new member's")
        for m in (a, b, c):
            m.close()


@skip_on_mock("static membership, node restarts")
class StaticMembershipTest(GroupTestBase):
    def test_static_member_restart_does_not_rebalance(self):
        topic, group = "grp-static", "g-static"
        self.target.create_topic(topic, 6)
        bootstrap = self.target.bootstrap
        session_ms = 10000
        conf = lambda i: {"group.instance.id": f"static-{i}", "session.timeout.ms": str(session_ms)}
        cs = [self.consumer(bootstrap, topic, group, conf(i), name=f"s{i}") for i in range(3)]
        self.wait_assignment(cs, 6, [2, 2, 2], 60, "three static members")
        # Let the group settle: joins of the later members may still be echoing.
        time.sleep(1)
        self.wait_assignment(cs, 6, [2, 2, 2], 5, "three static members, settled")
        marks = [len(c.snapshot()) for c in cs]
        old = cs[2].owned()

        t_kill = time.monotonic()
        cs[2].kill()
        again = self.consumer(bootstrap, topic, group, conf(2), name="s2-again")
        wait_until(lambda: again.owned(), 30, "the restarted static member assigned")
        self.assertLess(time.monotonic() - t_kill, session_ms / 1000,
                        "the restart took longer than the session timeout: test too slow")
        self.assertEqual(again.owned(), old)
        # Past the old session's expiry: had the coordinator not replaced the old member, it
        # would have expired it and rebalanced by now.
        deadline = t_kill + session_ms / 1000 + 3
        while time.monotonic() < deadline:
            for c, m in zip(cs[:2], marks[:2]):
                self.assertEqual(c.rebalance_events(m), [], f"{c.name} saw a rebalance")
            time.sleep(0.2)
        for c, m in zip(cs[:2], marks[:2]):
            self.assertEqual(c.rebalance_events(m), [], f"{c.name} saw a rebalance")
        self.assertEqual(again.owned(), old)
        for c in (cs[0], cs[1], again):
            c.close()


@skip_on_mock("node restarts")
class CommittedOffsetsTest(unittest.TestCase):
    """Committed offsets survive a consumer restart and a node restart. The node keeps the
    default 50 partitions of __consumer_offsets, loaded back at restart."""

    def setUp(self):
        self.node = Node({"group.initial.rebalance.delay.ms": "0"}).start()
        self.procs = []

    def tearDown(self):
        for c in self.procs:
            c.cleanup()
        self.node.cleanup()

    def run_consumer(self, topic, group, n):
        """A consumer that processes n records, commits them and closes; returns them."""
        c = ConsumerProc(self.node.bootstrap, topic, group, name="r", max_records=n)
        self.procs.append(c)
        try:
            c.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.fail(f"consumer did not finish: {c.describe()}")
        c.reader.join(timeout=10)
        self.assertEqual(c.proc.returncode, 0, c.describe())
        recs = c.records()
        self.assertEqual(len(recs), n, c.describe())
        return c, recs

    def test_resume_after_consumer_and_node_restart(self):
        from confluent_kafka.admin import AdminClient, NewTopic
        from confluent_kafka import Producer as P
        topic, group, partitions, per = "grp-resume", "g-resume", 2, 20
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
        p = P({"bootstrap.servers": self.node.bootstrap})
        for i in range(partitions * per):
            p.produce(topic, value=b"x", partition=i % partitions)
        self.assertEqual(p.flush(30), 0)
        del p, admin  # their connections would only complain through the node restart

        def check_next(recs, committed):
            """Each partition's first record read is exactly the committed offset (0 when
            nothing was committed: auto.offset.reset=earliest)."""
            first = {}
            for part, off in recs:
                first.setdefault(part, off)
            for part, off in first.items():
                want = committed.get(part, -1)
                self.assertEqual(off, max(want, 0),
                                 f"partition {part} resumed at {off}, committed {committed}")

        def expected_committed(all_recs):
            out = {}
            for part, off in all_recs:
                out[part] = max(out.get(part, 0), off + 1)
            return out

        read = []
        _, recs = self.run_consumer(topic, group, 15)
        read += recs
        got = committed_offsets(self.node.bootstrap, group, topic, partitions)
        want = expected_committed(read)
        self.assertEqual({k: v for k, v in got.items() if v >= 0}, want)

        # Consumer restart: resumes at the committed offsets.
        _, recs = self.run_consumer(topic, group, 10)
        check_next(recs, got)
        read += recs
        got = committed_offsets(self.node.bootstrap, group, topic, partitions)
        self.assertEqual({k: v for k, v in got.items() if v >= 0}, expected_committed(read))

        # Node restart: the offsets come back from __consumer_offsets.
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        after = None
        def fetched():
            nonlocal after
            after = committed_offsets(self.node.bootstrap, group, topic, partitions)
            return True
        wait_until(fetched, 60, "OffsetFetch after the node restart")
        self.assertEqual(after, got, "committed offsets changed across the node restart")
        _, recs = self.run_consumer(topic, group, partitions * per - 25)
        check_next(recs, got)
        read += recs
        self.assertEqual(sorted(read), sorted((i % partitions, i // partitions)
                                              for i in range(partitions * per)),
                         "every record exactly once across the three consumers")


if __name__ == "__main__":
    unittest.main()
