"""kafka-console-producer, kafka-console-consumer, kafka-get-offsets and kafka-delete-records
(Kafka 4.4's ConsoleProducer, ConsoleConsumer, GetOffsetShell, DeleteRecordsCommand) against
the target."""
import json
import os
import re
import tempfile
import time
import unittest

from peers import TargetTestCase

NOT_IDEMPOTENT = ("--command-property", "enable.idempotence=false")
KEYED = ("--reader-property", "parse.key=true", "--reader-property", "key.separator=:")


def offsets(text):
    """{partition: offset} from kafka-get-offsets output lines `topic:partition:offset`."""
    result = {}
    for line in text.splitlines():
        m = re.match(r"^(.+):(\d+):(-?\d*)$", line.strip())
        if m:
            result[int(m.group(2))] = int(m.group(3)) if m.group(3) else None
    return result


class ConsoleTest(TargetTestCase):
    def produce(self, topic, lines, *extra):
        return self.tool("kafka-console-producer", "--topic", topic, *extra,
                         input="".join(f"{l}\n" for l in lines), timeout=120)

    def consume(self, topic, count, *extra):
        """The records as (partition, offset, key, value), read from the beginning."""
        out = self.tool("kafka-console-consumer", "--topic", topic, "--from-beginning",
                        "--max-messages", str(count), "--timeout-ms", "30000",
                        "--formatter-property", "print.partition=true",
                        "--formatter-property", "print.offset=true",
                        "--formatter-property", "print.key=true", *extra, timeout=120)
        records = []
        for line in out.stdout.splitlines():
            m = re.match(r"^Partition:(\d+)\tOffset:(\d+)\t(.*)\t(.*)$", line)
            if m:
                records.append((int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)))
        self.assertIn(f"Processed a total of {len(records)} messages", out.stderr)
        return records

    def get_offsets(self, topic, *extra):
        return offsets(self.tool("kafka-get-offsets", "--topic", topic, *extra).stdout)

    def check_keyed_round_trip(self, topic, *producer_extra):
        self.tool("kafka-topics", "--create", "--topic", topic, "--partitions", "3")
        lines = [f"key-{i % 5}:value-{i}" for i in range(30)]
        self.produce(topic, lines, *KEYED, *producer_extra)
        records = self.consume(topic, len(lines))
        self.assertEqual(len(records), len(lines))
        self.assertEqual(sorted(f"{k}:{v}" for _, _, k, v in records), sorted(lines))
        # One key, one partition; within it the order produced; offsets from 0 without gaps.
        partition_of = {}
        for p, _, k, _ in records:
            self.assertEqual(partition_of.setdefault(k, p), p, f"{k} in two partitions")
        by_partition = {}
        for p, o, k, v in sorted(records):
            by_partition.setdefault(p, []).append((o, f"{k}:{v}"))
        for p, recs in by_partition.items():
            self.assertEqual([o for o, _ in recs], list(range(len(recs))))
            produced = [l for l in lines if partition_of[l.split(":")[0]] == p]
            self.assertEqual([l for _, l in recs], produced)
        self.assertEqual(self.get_offsets(topic),
                         {p: len(by_partition.get(p, [])) for p in range(3)})

    def test_keyed_round_trip_idempotent_producer(self):
        self.check_keyed_round_trip(self.topic())

    def test_keyed_round_trip(self):
        # enable.idempotence=false: the idempotent default needs InitProducerId (see above).
        self.check_keyed_round_trip(self.topic(), *NOT_IDEMPOTENT)

    def test_get_offsets_earliest_latest_max_timestamp_and_by_time(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "2")
        before = int(time.time() * 1000) - 1
        self.produce(t, [f"v{i}" for i in range(7)], *NOT_IDEMPOTENT)
        after = int(time.time() * 1000) + 60_000
        latest = self.get_offsets(t)
        self.assertEqual(sum(latest.values()), 7)
        self.assertEqual(self.get_offsets(t, "--time", "-1"), latest)
        self.assertEqual(self.get_offsets(t, "--time", "-2"), {0: 0, 1: 0})
        # -3: the offset of the record with the largest timestamp, per partition that has one.
        max_ts = self.get_offsets(t, "--time", "-3")
        for p, end in latest.items():
            if end:
                self.assertTrue(0 <= max_ts[p] < end, (p, max_ts, latest))
        # A timestamp before every record: the first offset of each partition that has
        # records (an empty one has no offset for it); after every record: none.
        self.assertEqual(self.get_offsets(t, "--time", str(before)),
                         {p: 0 for p, end in latest.items() if end})
        self.assertEqual(self.get_offsets(t, "--time", str(after)), {})
        # One partition only, by --topic-partitions.
        out = self.tool("kafka-get-offsets", "--topic-partitions", f"{t}:1").stdout
        self.assertEqual(offsets(out), {1: latest[1]})

    def test_get_offsets_earliest_local_and_latest_tiered(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        self.produce(t, ["a", "b", "c"], *NOT_IDEMPOTENT)
        # -4: the earliest offset in local storage, all of it without tiered storage.
        self.assertEqual(self.get_offsets(t, "--time", "-4"), {0: 0})
        # -5: the latest tiered offset; without tiered storage there is none to print.
        out = self.tool("kafka-get-offsets", "--topic", t, "--time", "-5")
        self.assertEqual((out.stdout, out.stderr), ("", ""))

    def test_delete_records(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        self.produce(t, [f"v{i}" for i in range(10)], *NOT_IDEMPOTENT)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"partitions": [{"topic": t, "partition": 0, "offset": 4}],
                       "version": 1}, f)
        try:
            out = self.tool("kafka-delete-records", "--offset-json-file", f.name)
        finally:
            os.unlink(f.name)
        self.assertIn(f"partition: {t}-0\tlow_watermark: 4", out.stdout)
        self.assertEqual(self.get_offsets(t, "--time", "-2"), {0: 4})
        self.assertEqual(self.get_offsets(t, "--time", "-1"), {0: 10})
        records = self.consume(t, 6)
        self.assertEqual([(o, v) for _, o, _, v in records],
                         [(i, f"v{i}") for i in range(4, 10)])


if __name__ == "__main__":
    unittest.main()
