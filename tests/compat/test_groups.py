"""kafka-consumer-groups (Kafka 4.4's ConsumerGroupCommand) against the target: a group's
offsets and lag after a console consumer, offsets reset to the earliest, list and delete."""
import subprocess
import unittest

from peers import KAFKA, TargetTestCase, wait_until

NOT_IDEMPOTENT = ("--command-property", "enable.idempotence=false")  # see test_console


def table(text, first_column):
    """The rows of a ConsumerGroupCommand table as dicts keyed by its header."""
    rows, header = [], None
    for line in text.splitlines():
        cols = line.split()
        if cols and cols[0] == first_column:
            header = cols
        elif header and len(cols) == len(header):
            rows.append(dict(zip(header, cols)))
    return rows


class ConsumerGroupsTest(TargetTestCase):
    def produce(self, topic, count, start=0):
        self.tool("kafka-console-producer", "--topic", topic, *NOT_IDEMPOTENT,
                  "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
                  input="".join(f"k{i % 4}:v{i}\n" for i in range(start, start + count)),
                  timeout=120)

    def consume_all(self, topic, group, count):
        out = self.tool("kafka-console-consumer", "--topic", topic, "--group", group,
                        "--from-beginning", "--max-messages", str(count), "--timeout-ms",
                        "30000", timeout=120)
        self.assertIn(f"Processed a total of {count} messages", out.stderr)

    def describe(self, group):
        out = self.tool("kafka-consumer-groups", "--describe", "--group", group)
        return {int(r["PARTITION"]): r for r in table(out.stdout, "GROUP")}, out.stdout + out.stderr

    def test_describe_lag_and_reset_to_earliest(self):
        t, g = self.topic(), self.topic("-group")
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "2")
        self.produce(t, 12)
        # The console consumer commits what it read when it closes.
        self.consume_all(t, g, 12)
        self.produce(t, 5, start=12)
        ends = {}
        for line in self.tool("kafka-get-offsets", "--topic", t).stdout.split():
            _, p, o = line.rsplit(":", 2)
            ends[int(p)] = int(o)
        self.assertEqual(sum(ends.values()), 17)

        self.assertIn(g, self.tool("kafka-consumer-groups", "--list").stdout.split())
        rows, out = self.describe(g)
        self.assertIn(f"Consumer group '{g}' has no active members.", out)
        self.assertEqual(sorted(rows), [0, 1])
        for p, row in rows.items():
            self.assertEqual(row["GROUP"], g)
            self.assertEqual(row["TOPIC"], t)
            self.assertEqual(int(row["LOG-END-OFFSET"]), ends[p])
            self.assertEqual(int(row["CURRENT-OFFSET"]) + int(row["LAG"]), ends[p])
            self.assertEqual(row["CONSUMER-ID"], "-")
        self.assertEqual(sum(int(r["LAG"]) for r in rows.values()), 5)

        # --dry-run shows the new offsets and changes nothing.
        dry = self.tool("kafka-consumer-groups", "--reset-offsets", "--group", g, "--topic", t,
                        "--to-earliest", "--dry-run").stdout
        self.assertEqual({int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(dry, "GROUP")},
                         {0: 0, 1: 0})
        self.assertEqual(sum(int(r["LAG"]) for r in self.describe(g)[0].values()), 5)

        out = self.tool("kafka-consumer-groups", "--reset-offsets", "--group", g, "--topic", t,
                        "--to-earliest", "--execute").stdout
        self.assertEqual({int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(out, "GROUP")},
                         {0: 0, 1: 0})
        rows, _ = self.describe(g)
        self.assertEqual({p: int(r["CURRENT-OFFSET"]) for p, r in rows.items()}, {0: 0, 1: 0})
        self.assertEqual({p: int(r["LAG"]) for p, r in rows.items()}, ends)

        # The group reads everything again from where the reset put it.
        self.consume_all(t, g, 17)
        rows, _ = self.describe(g)
        self.assertEqual({p: int(r["LAG"]) for p, r in rows.items()}, {0: 0, 1: 0})

    def test_describe_active_member(self):
        t, g = self.topic(), self.topic("-group")
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "2")
        # A console consumer that stays in the group for up to 20 s without records.
        consumer = subprocess.Popen(
            [KAFKA, "tool", "kafka-console-consumer", "--bootstrap-server", self.bootstrap,
             "--topic", t, "--group", g, "--timeout-ms", "20000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def stable():
                out = self.tool("kafka-consumer-groups", "--describe", "--group", g, "--state")
                rows = table(out.stdout, "GROUP")
                return rows and rows[0]["STATE"] == "Stable" and rows[0]["#MEMBERS"] == "1"
            wait_until(stable, 40, f"{g} Stable with one member", interval=1)
            out = self.tool("kafka-consumer-groups", "--describe", "--group", g, "--members",
                            "--verbose").stdout
            rows = table(out, "GROUP")
            self.assertEqual(len(rows), 1, out)
            self.assertEqual(rows[0]["CLIENT-ID"], "console-consumer")
            self.assertEqual(rows[0]["HOST"], "/127.0.0.1")
            self.assertEqual(rows[0]["#PARTITIONS"], "2")
            self.assertEqual(rows[0]["CURRENT-ASSIGNMENT"], f"{t}:0,1")
        finally:
            consumer.terminate()
            consumer.wait(timeout=30)

    def test_reset_to_offset_and_delete_group(self):
        t, g = self.topic(), self.topic("-group")
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        self.produce(t, 3)
        self.consume_all(t, g, 3)
        out = self.tool("kafka-consumer-groups", "--reset-offsets", "--group", g, "--topic", t,
                        "--to-offset", "1", "--execute").stdout
        self.assertEqual([int(r["NEW-OFFSET"]) for r in table(out, "GROUP")], [1])
        self.assertEqual(int(self.describe(g)[0][0]["LAG"]), 2)
        out = self.tool("kafka-consumer-groups", "--delete", "--group", g).stdout
        self.assertIn(f"Deletion of requested consumer groups ('{g}') was successful.", out)
        self.assertNotIn(g, self.tool("kafka-consumer-groups", "--list").stdout.split())
        gone = self.tool("kafka-consumer-groups", "--describe", "--group", g, check=False)
        self.assertEqual(table(gone.stdout, "GROUP"), [])

    def test_describe_unknown_group(self):
        g = self.topic("-group")
        out = self.tool("kafka-consumer-groups", "--describe", "--group", g, check=False)
        # (Kafka 4.4's tool prints the error and still exits 0.)
        self.assertEqual(out.returncode, 0)
        self.assertIn(f"GroupIdNotFoundException: Group {g} not found.", out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
