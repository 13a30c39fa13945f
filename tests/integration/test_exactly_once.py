"""Exactly once end to end, with real clients and real faults.

- Consume-transform-produce (confluent_kafka): a transactional loop reads an input topic in a
  consumer group (read_committed), writes each record transformed to an output topic and
  commits the group's offsets in the same transaction (send_offsets_to_transaction) every
  BATCH records. brokerd is kill -9'd twice with a transaction open: once with records of it
  in flight, once with its offsets sent (pending in the group coordinator) and the commit
  not yet asked for. The loop recovers as an application does: it aborts on abortable
  errors, makes a new producer on fatal ones, retries retriable ones, and rewinds to the
  group's committed offsets after an abort or a rebalance. Then the output is the input
  transformed, exactly once and in order per partition, and the group's committed offsets
  are the input's ends.
- A whole-node restart, by SIGTERM and by kill -9 of every process (supervisor and roles):
  an idempotent producer's state survives (its last batch retried after the restart is
  answered as a duplicate with its first offsets, its sequence continues, a gap is refused)
  and so does the partition's last stable offset (held at an open transaction's first record),
  and the transaction coordinator's state (an open transaction is still Ongoing and can be
  aborted, a completed one is listed with its state, one committed just before the stop,
  its markers maybe not all written, completes, a transactional id's epoch continues).
- KafkaJS transactions (kafkajs_client.js txn): commits and aborts in turn, each with
  records in every partition and the group offset of sendOffsets; a KafkaJS group consumer
  (read_committed, KafkaJS's default) reads exactly the committed records in order, a
  read_uncommitted read all of them, and the group's offset is the last committed one.
"""
import json
import os
import struct
import subprocess
import time
import unittest

from harness import Node, wait_until
from kafka_clients import HERE, ensure_kafkajs, parse_got_line
from kafka_wire import ApiReader, Connection, record_batch
from test_transactions import (NODE_CONFIG, NONE, add_partitions, create_topic, describe_txns,
                               end_txn, find_txn_coordinator, init_txn, list_txns)
from test_idempotence import init_producer_id

LIST_OFFSETS = 2
OUT_OF_ORDER_SEQUENCE_NUMBER = 45

CTP_RECORDS = 2000
CTP_PARTITIONS = 3
CTP_BATCH = 100  # records per transaction


def latest_offset(conn, topic, partition, read_committed):
    """(error, offset) of ListOffsets v2 for the latest offset: the last stable offset with
    read_committed, else the high watermark."""
    name = topic.encode()
    body = struct.pack(">ib", -1, 1 if read_committed else 0)
    body += struct.pack(">ih", 1, len(name)) + name + struct.pack(">iiq", 1, partition, -1)
    r = ApiReader(conn.request(LIST_OFFSETS, 2, body))
    r.take(">i")  # throttle time
    r.take(">i")  # one topic
    r.string()
    r.take(">i")  # one partition
    _, error, _, offset = r.take(">ihqq")
    return error, offset


def transform(value):
    return b"out:" + value


class ConsumeTransformProduceTest(unittest.TestCase):
    def setUp(self):
        self.node = Node(NODE_CONFIG).start()
        self.addCleanup(self.node.cleanup)

    def fill_input(self, topic):
        """CTP_RECORDS records, record i (8 bytes, big-endian i) in partition i % partitions."""
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.node.bootstrap, "enable.idempotence": True,
                      "linger.ms": 5})
        for i in range(CTP_RECORDS):
            p.produce(topic, i.to_bytes(8, "big"), partition=i % CTP_PARTITIONS)
            p.poll(0)
        self.assertEqual(p.flush(30), 0)
        return {part: [i.to_bytes(8, "big") for i in range(part, CTP_RECORDS, CTP_PARTITIONS)]
                for part in range(CTP_PARTITIONS)}

    def read_committed(self, topic):
        """{partition: [values]} of the whole topic, read_committed, without a group."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        c = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": f"check-{topic}",
                      "isolation.level": "read_committed", "enable.partition.eof": True,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, p, 0) for p in range(CTP_PARTITIONS)])
        got, at_end = {p: [] for p in range(CTP_PARTITIONS)}, set()
        deadline = time.monotonic() + 60
        try:
            while len(at_end) < CTP_PARTITIONS and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                    continue
                got[m.partition()].append(m.value())
        finally:
            c.close()
        self.assertEqual(len(at_end), CTP_PARTITIONS, "the end of every partition was reached")
        return got

    def test_output_is_the_input_exactly_once_through_a_brokerd_kill(self):
        from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
        src, dst, group = "ctp-in", "ctp-out", "ctp"
        create_topic(self.node.bootstrap, src, CTP_PARTITIONS)
        create_topic(self.node.bootstrap, dst, CTP_PARTITIONS)
        expected = self.fill_input(src)

        def new_producer():
            p = Producer({"bootstrap.servers": self.node.bootstrap, "transactional.id": "ctp-app",
                          "message.timeout.ms": 30000, "transaction.timeout.ms": 30000,
                          "linger.ms": 5})
            p.init_transactions(60)
            return p

        rebalanced = []
        consumer = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                             "heartbeat.interval.ms": 500})
        self.addCleanup(consumer.close)
        consumer.subscribe([src], on_assign=lambda c, ps: rebalanced.append("assign"),
                           on_revoke=lambda c, ps: rebalanced.append("revoke"))
        producer = new_producer()

        def rewind():
            """Every assigned partition back to the group's committed offset."""
            assignment = consumer.assignment()
            for tp in consumer.committed(assignment, timeout=30):
                consumer.seek(TopicPartition(tp.topic, tp.partition,
                                             tp.offset if tp.offset >= 0 else 0))

        def retrying(step):
            """step() again while it fails with a retriable error (a few times)."""
            for _ in range(10):
                try:
                    return step()
                except KafkaException as e:
                    if not e.args[0].retriable() or e.args[0].txn_requires_abort():
                        raise
                    stats["retries"] += 1
            return step()

        stats = {"commits": 0, "aborts": 0, "new_producers": 0, "retries": 0}
        committed = {}  # partition: the offset the last committed transaction gave the group
        in_txn, pending = False, 0
        kills = []  # the pids of brokerd killed
        started = time.monotonic()
        deadline = started + 180
        while sum(committed.values()) < CTP_RECORDS:
            self.assertLess(time.monotonic(), deadline, f"the loop stalled: {committed} {stats}")
            try:
                if not in_txn:
                    producer.begin_transaction()
                    in_txn, pending = True, 0
                m = consumer.poll(0.1)
                if rebalanced:
                    # What was read before the rebalance may be read again: drop it.
                    rebalanced.clear()
                    if pending:
                        retrying(lambda: producer.abort_transaction(60))
                        stats["aborts"] += 1
                        in_txn = False
                        rewind()
                        continue
                if m is not None and not m.error():
                    while True:
                        try:
                            producer.produce(dst, transform(m.value()), partition=m.partition())
                            break
                        except BufferError:
                            producer.poll(0.1)
                    producer.poll(0)
                    pending += 1
                    if not kills and stats["commits"] == 5 and pending == CTP_BATCH // 2:
                        # Half a transaction written, some of it still in flight.
                        kills.append(self.node.kill_role("brokerd"))
                if pending >= CTP_BATCH or (m is None and pending):
                    assignment = consumer.assignment()
                    positions = [tp for tp in consumer.position(assignment) if tp.offset >= 0]
                    producer.send_offsets_to_transaction(
                        positions, consumer.consumer_group_metadata(), 60)
                    if len(kills) == 1 and stats["commits"] == 12:
                        # The offsets pending in the group coordinator, the commit not sent.
                        kills.append(self.node.kill_role("brokerd"))
                    retrying(lambda: producer.commit_transaction(60))
                    in_txn = False
                    stats["commits"] += 1
                    for tp in positions:
                        committed[tp.partition] = tp.offset
            except KafkaException as e:
                error = e.args[0]
                if error.fatal():
                    producer = new_producer()  # fences and aborts the old instance's transaction
                    stats["new_producers"] += 1
                elif error.txn_requires_abort():
                    retrying(lambda: producer.abort_transaction(60))
                    stats["aborts"] += 1
                elif error.retriable():
                    stats["retries"] += 1
                    continue  # the same step again (a produce is not retried: librdkafka does)
                else:
                    raise
                in_txn = False
                rewind()
        elapsed = time.monotonic() - started
        print(f"\nconsume-transform-produce: {CTP_RECORDS} records in {elapsed:.1f} s, {stats}")
        self.assertEqual(len(kills), 2, "brokerd was killed twice in the middle of the run")
        self.assertEqual(self.node.status()["brokerd"]["restarts"], 2)

        # The group's offsets are the input's ends, as a new member of the group reads them.
        self.assertEqual(committed, {p: len(expected[p]) for p in range(CTP_PARTITIONS)})
        fresh = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": group,
                          "isolation.level": "read_committed"})
        try:
            offsets = fresh.committed([TopicPartition(src, p) for p in range(CTP_PARTITIONS)],
                                      timeout=30)
        finally:
            fresh.close()
        self.assertEqual({tp.partition: tp.offset for tp in offsets}, committed)
        # Each input record transformed once, in the input's order.
        got = self.read_committed(dst)
        for p in range(CTP_PARTITIONS):
            self.assertEqual(len(got[p]), len(expected[p]), f"partition {p}")
            self.assertEqual(got[p], [transform(v) for v in expected[p]], f"partition {p}")


class NodeRestartStateTest(unittest.TestCase):
    """Producer and coordinator state across a restart of the whole node."""

    def setUp(self):
        self.node = Node(NODE_CONFIG).start()
        self.addCleanup(self.node.cleanup)
        create_topic(self.node.bootstrap, "st", 2)

    def connect(self):
        conn = Connection(self.node.bootstrap)
        self.addCleanup(conn.sock.close)
        wait_until(lambda: find_txn_coordinator(conn, "st-open") == (NONE, 1), 60,
                   "the transaction coordinator")
        wait_until(lambda: find_txn_coordinator(conn, "st-done") == (NONE, 1), 60,
                   "the transaction coordinator")
        return conn

    def kill_node(self):
        self.node.kill_all()

    def restart(self, how):
        if how == "sigterm":
            self.assertEqual(self.node.stop(), 0)
        else:
            self.kill_node()
        self.node.start()

    def produce(self, conn, topic, partition, batch, txn_id=None):
        got = conn.produce(8, -1, topic, {partition: batch}, transactional_id=txn_id)
        return got[(topic, partition)]["error"], got[(topic, partition)]["base_offset"]

    def state_survives(self, how):
        conn = self.connect()
        # Now: a producer whose last batch is older than producer.id.expiration.ms (a day)
        # is dropped at load, as in Kafka.
        now = int(time.time() * 1000)

        # An idempotent producer: two batches of 5 to partition 0.
        error, idem, _ = init_producer_id(conn, 4)
        self.assertEqual(error, NONE)

        def idem_batch(seq, n=5):
            return record_batch([b"i%d" % (seq + k) for k in range(n)], now, producer_id=idem,
                                producer_epoch=0, base_sequence=seq)
        self.assertEqual(self.produce(conn, "st", 0, idem_batch(0)), (NONE, 0))
        self.assertEqual(self.produce(conn, "st", 0, idem_batch(5)), (NONE, 5))

        # A transactional id with a committed transaction.
        error, done_pid, done_epoch = init_txn(conn, "st-done")
        self.assertEqual((error, done_epoch), (NONE, 0))
        self.assertEqual(add_partitions(conn, "st-done", done_pid, 0, {"st": [1]}),
                         {("st", 1): NONE})
        self.assertEqual(self.produce(conn, "st", 1, record_batch(
            [b"committed"], now, attributes=0x10, producer_id=done_pid, producer_epoch=0,
            base_sequence=0), "st-done")[0], NONE)
        self.assertEqual(end_txn(conn, "st-done", done_pid, 0, commit=True), NONE)
        wait_until(lambda: list_txns(conn, pattern="st-done")[2] == {"st-done": "CompleteCommit"},
                   30, "the commit completed")
        # And one open, with a record in partition 1.
        error, open_pid, open_epoch = init_txn(conn, "st-open")
        self.assertEqual((error, open_epoch), (NONE, 0))
        self.assertEqual(add_partitions(conn, "st-open", open_pid, 0, {"st": [1]}),
                         {("st", 1): NONE})
        self.assertEqual(self.produce(conn, "st", 1, record_batch(
            [b"open"], now, attributes=0x10, producer_id=open_pid, producer_epoch=0,
            base_sequence=0), "st-open")[0], NONE)

        # And one committed just before the stop: EndTxn is answered once PrepareCommit is
        # stored, its markers may still be on their way.
        error, flight_pid, _ = init_txn(conn, "st-flight")
        self.assertEqual(add_partitions(conn, "st-flight", flight_pid, 0, {"st": [1]}),
                         {("st", 1): NONE})
        self.assertEqual(self.produce(conn, "st", 1, record_batch(
            [b"flight"], now, attributes=0x10, producer_id=flight_pid, producer_epoch=0,
            base_sequence=0), "st-flight")[0], NONE)
        self.assertEqual(end_txn(conn, "st-flight", flight_pid, 0, commit=True), NONE)

        self.restart(how)
        conn = self.connect()

        # The retried last batch is a duplicate: its first offset, nothing appended.
        self.assertEqual(self.produce(conn, "st", 0, idem_batch(5)), (NONE, 5))
        # The sequence continues where it was, and a gap is refused.
        self.assertEqual(self.produce(conn, "st", 0, idem_batch(10)), (NONE, 10))
        self.assertEqual(self.produce(conn, "st", 0, idem_batch(20))[0],
                         OUT_OF_ORDER_SEQUENCE_NUMBER)
        self.assertEqual(self.produce(conn, "st", 0, idem_batch(15)), (NONE, 15))

        # Partition 1: "committed", its marker, then the open transaction's first record,
        # where read_committed readers stop.
        self.assertEqual(latest_offset(conn, "st", 1, read_committed=True), (NONE, 2))

        # The coordinator: the transactions as they were.
        wait_until(lambda: list_txns(conn, pattern="st-flight")[2] ==
                   {"st-flight": "CompleteCommit"}, 30, "the commit in flight completed")
        self.assertEqual(list_txns(conn, pattern="st-.*")[2],
                         {"st-open": "Ongoing", "st-done": "CompleteCommit",
                          "st-flight": "CompleteCommit"})
        self.assertEqual(describe_txns(conn, ["st-open"])["st-open"],
                         (NONE, "Ongoing", open_pid, 0, {"st": [1]}))
        # The open one can be aborted, and its record is never read.
        self.assertEqual(end_txn(conn, "st-open", open_pid, 0, commit=False), NONE)
        wait_until(lambda: list_txns(conn, pattern="st-open")[2] == {"st-open": "CompleteAbort"},
                   30, "the abort completed")
        # The epochs continue.
        self.assertEqual(init_txn(conn, "st-done"), (NONE, done_pid, 1))
        self.assertEqual(init_txn(conn, "st-open"), (NONE, open_pid, 1))
        self.assertEqual(self.read_committed_values(), [b"committed", b"flight"])
        # Partition 0: the idempotent producer's 20 records, each once.
        self.assertEqual(self.read_committed_values(partition=0), [b"i%d" % i for i in range(20)])

    def read_committed_values(self, partition=1):
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        c = Consumer({"bootstrap.servers": self.node.bootstrap, "group.id": "st-check",
                      "isolation.level": "read_committed", "enable.partition.eof": True,
                      "enable.auto.commit": False})
        c.assign([TopicPartition("st", partition, 0)])
        values, deadline = [], time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    self.assertEqual(m.error().code(), KafkaError._PARTITION_EOF, m.error())
                    break
                values.append(m.value())
        finally:
            c.close()
        return values

    def test_sigterm(self):
        self.state_survives("sigterm")

    def test_kill_9_of_every_process(self):
        self.state_survives("kill")


class KafkaJSTransactionsTest(unittest.TestCase):
    TRANSACTIONS, PER_TXN, PARTITIONS, ABORT_EVERY = 12, 30, 3, 3

    def setUp(self):
        self.node_path = ensure_kafkajs()
        self.node = Node(NODE_CONFIG).start()
        self.addCleanup(self.node.cleanup)

    def kafkajs(self, *args, timeout=120):
        env = dict(os.environ, NODE_PATH=self.node_path, KAFKAJS_NO_PARTITIONER_WARNING="1")
        out = subprocess.run(["node", os.path.join(HERE, "kafkajs_client.js"), *args],
                             capture_output=True, text=True, timeout=timeout, env=env)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        return out.stdout.splitlines()

    def test_commit_and_abort_read_committed(self):
        topic, group = "kjs", "kjs-offsets"
        create_topic(self.node.bootstrap, topic, self.PARTITIONS)
        lines = self.kafkajs("txn", self.node.bootstrap, topic, json.dumps({
            "transactionalId": "kjs-txn", "transactions": self.TRANSACTIONS,
            "perTxn": self.PER_TXN, "partitions": self.PARTITIONS,
            "abortEvery": self.ABORT_EVERY, "group": group}))
        outcomes = [l.split() for l in lines if l.startswith(("commit ", "abort "))]
        committed = [int(t) for what, t in outcomes if what == "commit"]
        self.assertEqual([int(t) for _, t in outcomes], list(range(self.TRANSACTIONS)))
        self.assertEqual(len(committed), self.TRANSACTIONS - self.TRANSACTIONS // self.ABORT_EVERY)
        # sendOffsets: the offset of the last committed transaction, not of a later aborted one.
        self.assertEqual(lines[-1], f"offsets {max(committed) + 1}")
        self.assertLess(max(committed), self.TRANSACTIONS - 1)

        def values(txns):
            per = {p: [] for p in range(self.PARTITIONS)}
            for t in txns:
                for i in range(self.PER_TXN):
                    per[i % self.PARTITIONS].append(f"{t}:{i}")
            return per

        got = {p: [] for p in range(self.PARTITIONS)}
        for line in self.kafkajs("group-consume", self.node.bootstrap, topic, json.dumps({
                "group": "kjs-reader", "partitions": self.PARTITIONS, "timeoutMs": 60000})):
            p, v = line.split("\t")
            got[int(p)].append(v)
        self.assertEqual(got, values(committed))

        # read_uncommitted (the fetch of the consume mode): everything, "end" included.
        every = values(range(self.TRANSACTIONS))
        per = self.PER_TXN * self.TRANSACTIONS // self.PARTITIONS + 1
        wants = ",".join(f"{p}:0:{per}" for p in range(self.PARTITIONS))
        read = {p: [] for p in range(self.PARTITIONS)}
        for line in self.kafkajs("consume", self.node.bootstrap, topic, wants,
                                 json.dumps({"timeoutMs": 60000})):
            g = parse_got_line(line)
            read[g.partition].append(g.value.decode())
        self.assertEqual(read, {p: every[p] + ["end"] for p in range(self.PARTITIONS)})


if __name__ == "__main__":
    unittest.main()
