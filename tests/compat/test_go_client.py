"""franz-go (github.com/twmb/franz-go: kgo and kadm, pinned by tests/compat/go/go.mod) against
the target: produce, consume in classic and KIP-848 groups with commits, and the admin calls
(create topics, list offsets, list and describe groups, fetch a group's offsets).
tests/compat/go/main.go does the calls; scripts/peers/clients builds it into the peers cache."""
import unittest

from peers import ClientTestCase


class GoClientTest(ClientTestCase):
    client_kind = "go"

    @property
    def go(self):
        return self.client_of["client"]

    def create(self, topic, partitions):
        answer = self.go.ok("create_topics", topics=[topic], partitions=partitions)
        self.assertEqual(answer["errors"], {topic: None})

    def round_trip(self, server_side):
        t, g = self.topic(), self.topic("-group")
        self.create(t, 2)
        again = self.go.ok("create_topics", topics=[t], partitions=2)["errors"][t]
        self.assertEqual(again["kafka_error"], "TOPIC_ALREADY_EXISTS")

        produced = self.go.ok("produce", topic=t, count=12, idempotent=False)
        self.assertEqual(produced["producer_id"], -1)
        per_partition = {}
        for p, o in produced["records"]:
            per_partition.setdefault(p, []).append(o)
        for p, offsets in per_partition.items():
            self.assertEqual(offsets, list(range(len(offsets))), f"partition {p}")
        ends = self.go.ok("list_offsets", topics=[t], spec="latest")["offsets"]
        self.assertEqual(ends, {f"{t}:{p}": len(per_partition.get(p, [])) for p in (0, 1)})
        self.assertEqual(self.go.ok("list_offsets", topics=[t], spec="earliest")["offsets"],
                         {f"{t}:0": 0, f"{t}:1": 0})

        answer = self.go.ok("consume", topics=[t], group=g, count=12, server_side=server_side)
        self.assertEqual(answer["assignment"], [f"{t}:0", f"{t}:1"])
        self.assertEqual(sorted(r["v"] for r in answer["records"]),
                         sorted(f"v{i}" for i in range(12)))
        committed = {k: v for k, v in ends.items() if v}
        self.assertEqual(answer["committed"], committed)
        self.assertEqual(self.go.ok("fetch_offsets", group=g)["offsets"], committed)
        return g

    def test_classic_group(self):
        g = self.round_trip(server_side=False)
        self.assertEqual(self.go.ok("list_groups")["groups"][g],
                         {"state": "Empty", "protocol_type": "consumer", "type": "classic"})
        d = self.go.ok("describe_groups", groups=[g])["groups"][g]
        self.assertEqual((d["state"], d["protocol_type"], d["members"], d["coordinator"]),
                         ("Empty", "consumer", [], 1))

    def test_consumer_protocol_group(self):
        """KIP-848: kgo.ServerSideBalancer (ConsumerGroupHeartbeat v1)."""
        g = self.round_trip(server_side=True)
        self.assertEqual(self.go.ok("list_groups")["groups"][g],
                         {"state": "Empty", "protocol_type": "consumer", "type": "consumer"})

    def test_producer_defaults_idempotent(self):
        t = self.topic()
        self.create(t, 1)
        produced = self.go.ok("produce", topic=t, count=5)  # franz-go's defaults
        self.assertEqual(produced["records"], [[0, o] for o in range(5)])
        self.assertGreaterEqual(produced["producer_id"], 0)
        self.assertEqual(produced["producer_epoch"], 0)

    def test_describe_unknown_group(self):
        g = self.topic("-group")
        d = self.go.ok("describe_groups", groups=[g])["groups"][g]
        self.assertEqual(d.get("kafka_error"), "GROUP_ID_NOT_FOUND", d)


if __name__ == "__main__":
    unittest.main()
