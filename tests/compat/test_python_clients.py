"""confluent-kafka 2.x (librdkafka 2.x inside its wheel) and kafka-python 3.x, from PyPI in the
venv of scripts/peers/clients (not Debian's older python3-confluent-kafka and python3-kafka,
which tests/integration uses), against the target: each produces, consumes in a group with
commits, and administers (create topics, list and describe groups, group offsets, list
offsets). tests/compat/pyclients.py does the calls, one program per client."""
import unittest

from peers import ClientTestCase


class PythonClientsTest(ClientTestCase):
    client_kind = "python"
    clients = {"confluent": ("--client", "confluent"),
               "kafka-python": ("--client", "kafka-python")}

    def round_trip(self, client, producer_props, consumer_props=None):
        """Creates a topic of two partitions, produces 12 keyed records, consumes them in a
        group that commits, and checks what the admin says of the group and the offsets."""
        c = self.client_of[client]
        t, g = self.topic(), self.topic("-group")
        self.assertEqual(c.ok("create_topics", topics=[{"name": t, "partitions": 2}])["errors"],
                         {t: None})
        again = c.ok("create_topics", topics=[{"name": t, "partitions": 2}])["errors"][t]
        self.assertIn(again.get("kafka_error", again["error"]),
                      ("TOPIC_ALREADY_EXISTS", "TopicAlreadyExistsError"))

        records = c.ok("produce", topic=t, count=12, props=producer_props)["records"]
        per_partition = {}
        for i, (p, o) in enumerate(records):
            per_partition.setdefault(p, []).append(o)
        for p, offsets in per_partition.items():
            self.assertEqual(offsets, list(range(len(offsets))), f"partition {p}")
        ends = c.ok("list_offsets", partitions=[f"{t}:0", f"{t}:1"])["offsets"]
        self.assertEqual(ends, {f"{t}:{p}": len(per_partition.get(p, [])) for p in (0, 1)})

        answer = c.ok("consume", topics=[t], group=g, count=12, props=consumer_props or {})
        self.assertEqual(answer["assignment"], [f"{t}:0", f"{t}:1"])
        self.assertEqual(sorted(r["v"] for r in answer["records"]),
                         sorted(f"v{i}" for i in range(12)))
        for r in answer["records"]:
            self.assertEqual(r["k"], f"k{int(r['v'][1:]) % 4}")
        committed = {k: v for k, v in ends.items() if v}
        self.assertEqual(answer["committed"], committed)
        self.assertEqual(c.ok("list_group_offsets", group=g)["offsets"], committed)
        return c, g

    def test_confluent_round_trip(self):
        # librdkafka's producer defaults: acks=all, not idempotent.
        c, g = self.round_trip("confluent", {})
        listed = c.ok("list_groups")["groups"][g]
        self.assertEqual(listed, {"state": "EMPTY", "type": "CLASSIC", "simple": False})
        d = c.ok("describe_groups", groups=[g])["groups"][g]
        self.assertEqual((d["state"], d["type"], d["members"], d["coordinator"]),
                         ("EMPTY", "CLASSIC", [], 1))

    def test_confluent_consumer_protocol(self):
        """KIP-848 with librdkafka: group.protocol=consumer."""
        c, g = self.round_trip("confluent", {}, {"group.protocol": "consumer"})
        self.assertEqual(c.ok("list_groups")["groups"][g]["type"], "CONSUMER")
        d = c.ok("describe_groups", groups=[g])["groups"][g]
        self.assertEqual((d["state"], d["type"], d["members"]), ("EMPTY", "CONSUMER", []))

    def test_confluent_idempotent_producer(self):
        t = self.topic()
        c = self.client_of["confluent"]
        self.assertEqual(c.ok("create_topics", topics=[{"name": t, "partitions": 1}])["errors"],
                         {t: None})
        records = c.ok("produce", topic=t, count=5, props={"enable.idempotence": True})
        self.assertEqual(records["records"], [[0, o] for o in range(5)])

    def test_kafka_python_round_trip(self):
        # kafka-python 3 is idempotent by default (see below); this producer opts out.
        c, g = self.round_trip("kafka-python", {"enable_idempotence": False, "acks": "all"})
        listed = c.ok("list_groups")["groups"][g]
        self.assertEqual(listed, {"state": "Empty", "type": "classic", "protocol_type": "consumer"})
        d = c.ok("describe_groups", groups=[g])["groups"][g]
        self.assertEqual((d["state"], d["protocol_type"], d["members"]),
                         ("Empty", "consumer", []))

    def test_kafka_python_producer_defaults(self):
        t = self.topic()
        c = self.client_of["kafka-python"]
        self.assertEqual(c.ok("create_topics", topics=[{"name": t, "partitions": 1}])["errors"],
                         {t: None})
        records = c.ok("produce", topic=t, count=5)  # no props: the client's defaults
        self.assertEqual(records["records"], [[0, o] for o in range(5)])

    def test_kafka_python_transactional_producer(self):
        """Transactions committed and aborted in turn, each with records in both partitions and
        the group offset of send_offsets_to_transaction: read_committed reads the committed
        records, read_uncommitted all, and the group's offset is the last committed one."""
        t, g = self.topic(), self.topic("-group")
        c = self.client_of["kafka-python"]
        self.assertEqual(c.ok("create_topics", topics=[{"name": t, "partitions": 2}])["errors"],
                         {t: None})
        outcomes = [True, False, True, False]
        answer = c.ok("txn_produce", topic=t, partitions=2, transactional_id=f"{t}-txn", group=g,
                      transactions=[{"count": 10, "commit": ok} for ok in outcomes])
        # Per partition: 5 records of transaction 0, its COMMIT marker, 5 aborted records,
        # their ABORT marker, 5 records of transaction 2.
        first, third = answer["committed"]
        for p in (0, 1):
            self.assertEqual(sorted(o for q, o in first if q == p), list(range(5)))
            self.assertEqual(sorted(o for q, o in third if q == p), list(range(12, 17)))
        committed = sorted(f"{n}:{i}" for n in (0, 2) for i in range(10))
        read = c.ok("consume", topics=[t], group=self.topic("-rc"), count=20, commit=False,
                    props={"isolation_level": "read_committed"})["records"]
        self.assertEqual(sorted(r["v"] for r in read), committed)
        read = c.ok("consume", topics=[t], group=self.topic("-ru"), count=40, commit=False,
                    props={"isolation_level": "read_uncommitted"})["records"]
        self.assertEqual(sorted(r["v"] for r in read),
                         sorted(f"{n}:{i}" for n in range(4) for i in range(10)))
        self.assertEqual(c.ok("list_group_offsets", group=g)["offsets"], {f"{t}:0": 3})


if __name__ == "__main__":
    unittest.main()
