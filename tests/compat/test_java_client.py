"""Apache Kafka's Java client 4.4 (kafka-clients, as applications use it) against the target:
producers (the defaults, and not idempotent), consumers in classic and KIP-848 groups, and the
Admin client. tests/compat/java/ClientCheck.java does each call and answers in JSON; it runs in
one JVM per test class (scripts/peers/clients java)."""
import time
import unittest

from peers import ClientTestCase, wait_until

NOT_IDEMPOTENT = {"enable.idempotence": "false"}


class JavaClientTest(ClientTestCase):
    client_kind = "java"

    @property
    def java(self):
        return self.client_of["client"]

    def eventually(self, check, timeout=15):
        """Runs check() until it passes (what a broker learns from the metadata log, as a new
        topic or a config change, reaches Kafka's broker a moment after the call returns)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return check()
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def create(self, topic, partitions, **configs):
        answer = self.java.ok("create_topics", topics=[
            {"name": topic, "partitions": partitions, "configs": configs}])
        self.assertIsNone(answer["errors"][topic])
        return answer["topics"][topic]

    def end_offsets(self, topic, partitions, spec="latest"):
        answer = self.java.ok("list_offsets", spec=spec,
                              partitions=[f"{topic}:{p}" for p in range(partitions)])
        return {int(k.rsplit(":", 1)[1]): v["offset"] for k, v in answer["offsets"].items()}

    # ------------------------------------------------------------------ producers

    def test_producer_defaults_idempotent(self):
        t = self.topic()
        self.create(t, 1)
        answer = self.java.ok("produce", topic=t, count=10)  # no props: the client's defaults
        self.assertEqual(answer["records"], [[0, o] for o in range(10)])
        self.assertEqual(self.end_offsets(t, 1), {0: 10})

    def test_keyed_producer_not_idempotent(self):
        t = self.topic()
        self.create(t, 3)
        answer = self.java.ok("produce", topic=t, count=40, keys=8,
                              props={**NOT_IDEMPOTENT, "acks": "all", "linger.ms": "5"})
        records = answer["records"]
        self.assertEqual(len(records), 40)
        # Each key goes to one partition (the client's murmur2 partitioner) ...
        partition_of = {}
        for i, (p, _) in enumerate(records):
            self.assertEqual(partition_of.setdefault(i % 8, p), p, f"key k{i % 8}")
        # ... where the records take offsets 0, 1, 2, ... in the order they were sent.
        by_partition = {}
        for p, o in records:
            by_partition.setdefault(p, []).append(o)
        for p, offsets in by_partition.items():
            self.assertEqual(offsets, list(range(len(offsets))), f"partition {p}")
        ends = self.end_offsets(t, 3)
        self.assertEqual(ends, {p: len(by_partition.get(p, [])) for p in range(3)})

    def test_transactions_commit_and_abort(self):
        """The Java client's transactional producer (FindCoordinator key type 1,
        InitProducerId, Produce v12 and TxnOffsetCommit v5 adding to the transaction, EndTxn
        v5) and what
        its consumers read: read_committed sees the committed transactions only,
        read_uncommitted every record; the group's offsets are those of the last commit."""
        t = self.topic()
        self.create(t, 2)
        txns = [{"count": 4, "commit": True}, {"count": 3, "commit": False},
                {"count": 2, "commit": True}]
        answer = self.java.ok("transactions", topic=t, partitions=2, transactional_id=t + "-tx",
                              transactions=txns, group=t + "-group")
        by_partition = {0: ["0-0", "0-2", "2-0"], 1: ["0-1", "0-3", "2-1"]}
        self.assertEqual(answer["read_committed"], by_partition[0] + by_partition[1])
        self.assertEqual(sorted(answer["read_uncommitted"]),
                         sorted(["0-0", "0-1", "0-2", "0-3", "1-0", "1-1", "1-2", "2-0", "2-1"]))
        # sendOffsetsToTransaction (AddOffsetsToTxn, TxnOffsetCommit): the offsets of the
        # committed transactions count, the aborted one's (2) never did.
        self.assertEqual(answer["group_offsets"], {f"{t}:0": 3})
        # transaction.version 2, as a new Kafka 4.4 cluster runs: the Java producer sends no
        # AddPartitionsToTxn / AddOffsetsToTxn, and each of the 3 ends bumped the epoch from
        # InitProducerId's 0 (EndTxn v5).
        self.assertEqual((answer["producer_epoch"], answer["state"]), (3, "CompleteCommit"))

    # ------------------------------------------------------------------ consumers

    def produce(self, topic, count, start=0, **args):
        self.java.ok("produce", topic=topic, count=count, props=NOT_IDEMPOTENT,
                     value_prefix=f"v{start}-", **args)

    def test_classic_group_consume_and_commit(self):
        t, g = self.topic(), self.topic("-group")
        self.create(t, 2)
        self.produce(t, 12)
        answer = self.java.ok("consume", topics=[t], group=g, count=12)
        self.assertEqual(answer["assignment"], [f"{t}:0", f"{t}:1"])
        self.assertGreaterEqual(answer["generation"], 1)
        self.assertTrue(answer["member_id"])
        self.assertEqual(sorted(r["v"] for r in answer["records"]),
                         sorted(f"v0-{i}" for i in range(12)))
        ends = self.end_offsets(t, 2)
        self.assertEqual(answer["committed"], {f"{t}:{p}": o for p, o in ends.items() if o})

        offsets = self.java.ok("list_group_offsets", group=g)["offsets"]
        self.assertEqual({k: v["offset"] for k, v in offsets.items()}, answer["committed"])
        groups = self.java.ok("list_groups")["groups"]
        self.assertEqual(groups.get(g), {"type": "CLASSIC", "protocol": "consumer",
                                         "state": "EMPTY", "simple": False})
        described = self.java.ok("describe_groups", groups=[g])["groups"][g]
        self.assertEqual((described["state"], described["type"], described["members"]),
                         ("EMPTY", "CLASSIC", []))

        # The group goes on from what it committed: only the new records.
        self.produce(t, 3, start=12)
        again = self.java.ok("consume", topics=[t], group=g, count=3)
        self.assertEqual(sorted(r["v"] for r in again["records"]),
                         sorted(f"v12-{i}" for i in range(3)))

    def test_consumer_reads_many_partitions_through_a_fetch_session(self):
        """KIP-227: the consumer's fetches after its first are incremental (it names only the
        partitions it moved on, the broker answers only those with something new). With
        small fetch bounds it needs dozens of them, and still reads every record once, in
        order within each partition."""
        t, g = self.topic(), self.topic("-group")
        self.create(t, 16)
        sent = self.java.ok("produce", topic=t, count=320, keys=64,
                            props={**NOT_IDEMPOTENT, "linger.ms": "0"})["records"]
        answer = self.java.ok("consume", topics=[t], group=g, count=320,
                              props={"max.partition.fetch.bytes": "64", "fetch.max.bytes": "256"})
        expected, got = {}, {}
        for p, o in sent:
            expected.setdefault(p, []).append(o)
        for r in answer["records"]:
            got.setdefault(r["p"], []).append(r["o"])
        self.assertEqual(got, {p: sorted(offsets) for p, offsets in expected.items()})

    def test_consumer_protocol_group(self):
        """KIP-848: group.protocol=consumer, the assignment made by the coordinator."""
        t, g = self.topic(), self.topic("-group")
        self.create(t, 2)
        self.produce(t, 6)
        props = {"group.protocol": "consumer"}
        answer = self.java.ok("consume", topics=[t], group=g, count=6, props=props)
        self.assertEqual(answer["assignment"], [f"{t}:0", f"{t}:1"])
        self.assertEqual(sorted(r["v"] for r in answer["records"]),
                         sorted(f"v0-{i}" for i in range(6)))
        self.assertEqual(sum(answer["committed"].values()), 6)

        # A member that stays: described as a consumer-protocol group with its assignment.
        member = self.java.ok("member_start", name="m1", topics=[t], group=g, props=props,
                              client_id="kip848-member")
        try:
            self.assertEqual(member["assignment"], [f"{t}:0", f"{t}:1"])
            d = self.java.ok("describe_groups", groups=[g])["groups"][g]
            self.assertEqual((d["state"], d["type"], d["assignor"]),
                             ("STABLE", "CONSUMER", "uniform"))
            self.assertEqual(len(d["members"]), 1, d)
            m = d["members"][0]
            self.assertEqual((m["member_id"], m["client_id"], m["host"], m["assignment"]),
                             (member["member_id"], "kip848-member", "/127.0.0.1",
                              [f"{t}:0", f"{t}:1"]))
            self.assertEqual(self.java.ok("list_groups")["groups"][g]["type"], "CONSUMER")
            # Offsets of a group with a member cannot be altered by the admin.
            bad = self.java.call("alter_group_offsets", group=g, offsets={f"{t}:0": 0})
            self.assertTrue(bad["ok"])
            self.assertEqual(bad["errors"][f"{t}:0"]["error"], "UnknownMemberIdException")
        finally:
            self.java.ok("member_stop", name="m1")
        wait_until(lambda: self.java.ok("describe_groups", groups=[g])["groups"][g]["state"]
                   == "EMPTY", 30, f"{g} empty after its member left")

    # ------------------------------------------------------------------ admin

    def test_admin_topics(self):
        t = self.topic()
        created = self.create(t, 2, **{"cleanup.policy": "compact", "retention.ms": "3600000"})
        self.assertEqual((created["partitions"], created["replication_factor"]), (2, 1))
        again = self.java.ok("create_topics", topics=[{"name": t, "partitions": 2}])
        self.assertEqual(again["errors"][t]["error"], "TopicExistsException")
        self.assertIn(t, self.java.ok("list_topics")["names"])

        nodes = [n["id"] for n in self.java.ok("describe_cluster")["nodes"]]

        def described():
            d = self.java.ok("describe_topics", names=[t])["topics"][t]
            self.assertEqual(d["id"], created["id"])
            self.assertFalse(d["internal"])
            return [(p["partition"], p["replicas"], p["isr"], p["leader"])
                    for p in d["partitions"]]
        self.eventually(lambda: self.assertEqual(
            described(), [(p, nodes, nodes, nodes[0]) for p in range(2)]))

        self.assertEqual(self.java.ok("create_partitions", counts={t: 4})["errors"], {t: None})
        self.eventually(lambda: self.assertEqual(len(described()), 4))
        fewer = self.java.ok("create_partitions", counts={t: 3})["errors"][t]
        self.assertEqual(fewer["error"], "InvalidPartitionsException")

        self.assertEqual(self.java.ok("delete_topics", names=[t])["errors"], {t: None})
        wait_until(lambda: t not in self.java.ok("list_topics")["names"], 30, f"{t} deleted")
        gone = self.java.ok("delete_topics", names=[t])["errors"][t]
        self.assertEqual(gone["error"], "UnknownTopicOrPartitionException")

    def test_admin_describe_topics_in_pages(self):
        """Admin.describeTopics by name asks DescribeTopicPartitions (KIP-966) and follows its
        cursor when partitionSizeLimitPerResponse is below the partitions asked for. Its
        partitions carry ELR lists (empty here: one replica); from the Metadata fallback of a
        broker without the API they would be null."""
        t1, t2, missing = self.topic("-a"), self.topic("-b"), self.topic("-missing")
        self.create(t1, 5)
        self.create(t2, 3)

        def described():
            answer = self.java.ok("describe_topics", names=[t2, missing, t1], partition_limit=2)
            errors = answer["errors"]
            self.assertEqual((errors[t1], errors[t2]), (None, None))
            self.assertEqual(errors[missing]["error"], "UnknownTopicOrPartitionException")
            return answer["topics"]
        topics = self.eventually(lambda: described())
        self.assertEqual(sorted(topics), sorted([t1, t2]))
        for t, count in ((t1, 5), (t2, 3)):
            parts = topics[t]["partitions"]
            self.assertEqual([p["partition"] for p in parts], list(range(count)), t)
            for p in parts:
                self.assertEqual((p["leader"], p["replicas"], p["isr"]), (1, [1], [1]))
                self.assertEqual((p["elr"], p["last_known_elr"]), ([], []), t)

    def test_admin_configs(self):
        t = self.topic()
        self.create(t, 1, **{"retention.ms": "3600000"})

        def described(keys):
            configs = self.java.ok("describe_configs", name=t)["configs"]
            return {k: (configs[k]["value"], configs[k]["source"]) for k in keys}

        def wait_for(want):
            self.eventually(lambda: self.assertEqual(described(want), want))

        wait_for({"retention.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
                  "cleanup.policy": ("delete", "DEFAULT_CONFIG")})

        self.java.ok("alter_configs", name=t, set={"max.message.bytes": "65536"},
                     delete=["retention.ms"], append={"cleanup.policy": "compact"})
        wait_for({"max.message.bytes": ("65536", "DYNAMIC_TOPIC_CONFIG"),
                  "retention.ms": ("604800000", "DEFAULT_CONFIG"),
                  "cleanup.policy": ("delete,compact", "DYNAMIC_TOPIC_CONFIG")})
        self.java.ok("alter_configs", name=t, subtract={"cleanup.policy": "delete"})
        wait_for({"cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG")})

        bad = self.java.call("alter_configs", name=t, set={"retention.ms": "soon"})
        self.assertEqual(bad.get("error"), "InvalidConfigurationException", bad)
        self.assertIn("retention.ms", bad["message"])

    def test_admin_group_offsets(self):
        t, g = self.topic(), self.topic("-group")
        self.create(t, 2)
        self.produce(t, 10)
        ends = self.end_offsets(t, 2)
        # A group made by the admin alone (no member ever joined).
        answer = self.java.ok("alter_group_offsets", group=g,
                              offsets={f"{t}:0": 1, f"{t}:1": ends[1]})
        self.assertEqual(answer["errors"], {f"{t}:0": None, f"{t}:1": None})
        offsets = self.java.ok("list_group_offsets", group=g)["offsets"]
        self.assertEqual({k: v["offset"] for k, v in offsets.items()},
                         {f"{t}:0": 1, f"{t}:1": ends[1]})
        # A consumer of the group starts where the admin put it.
        consumed = self.java.ok("consume", topics=[t], group=g, count=ends[0] - 1)
        self.assertEqual(sorted((r["p"], r["o"]) for r in consumed["records"]),
                         [(0, o) for o in range(1, ends[0])])
        self.assertEqual(self.java.ok("delete_groups", groups=[g])["errors"], {g: None})
        self.assertNotIn(g, self.java.ok("list_groups")["groups"])

    def test_admin_delete_records_and_list_offsets(self):
        t = self.topic()
        self.create(t, 1)
        base = 1_700_000_000_000
        self.produce(t, 10, timestamp_base=base)  # record i at base + i ms
        answer = self.java.ok("delete_records", before={f"{t}:0": 4})
        self.assertEqual(answer["low_watermarks"], {f"{t}:0": 4})
        self.assertEqual(self.end_offsets(t, 1, "earliest"), {0: 4})
        self.assertEqual(self.end_offsets(t, 1, "latest"), {0: 10})
        self.assertEqual(self.end_offsets(t, 1, "max_timestamp"), {0: 9})
        self.assertEqual(self.end_offsets(t, 1, str(base + 6)), {0: 6})  # by timestamp
        self.assertEqual(self.end_offsets(t, 1, str(base)), {0: 4})  # the first one kept
        self.assertEqual(self.end_offsets(t, 1, str(base + 10)), {0: -1})  # none that late
        beyond = self.java.call("delete_records", before={f"{t}:0": 11})
        self.assertEqual(beyond.get("error"), "OffsetOutOfRangeException", beyond)

    def test_admin_cluster_and_quorum(self):
        cluster = self.java.ok("describe_cluster")
        self.assertTrue(cluster["cluster_id"])
        port = int(self.bootstrap.rsplit(":", 1)[1])
        self.assertEqual(cluster["nodes"], [{"id": 1, "host": "127.0.0.1", "port": port}])
        self.assertEqual(cluster["controller"]["id"], 1)
        quorum = self.java.ok("describe_quorum")
        self.assertEqual((quorum["leader_id"], [v["id"] for v in quorum["voters"]]), (1, [1]))
        self.assertGreater(quorum["high_watermark"], 0)
        self.assertGreaterEqual(quorum["leader_epoch"], 1)
        self.assertEqual(quorum["observers"], [])

    def test_describe_unknown_group(self):
        g = self.topic("-group")
        answer = self.java.ok("describe_groups", groups=[g])["groups"][g]
        self.assertEqual((answer.get("error"), answer.get("message")),
                         ("GroupIdNotFoundException", f"Group {g} not found."))


if __name__ == "__main__":
    unittest.main()
