"""kafka-producer-perf-test, kafka-consumer-perf-test, kafka-verifiable-producer and
kafka-verifiable-consumer (Kafka 4.4's ProducerPerformance, ConsumerPerformance,
VerifiableProducer and VerifiableConsumer: the clients of Kafka's own system tests) against the
target.

The verifiable tools print one JSON object per line on stdout, each with a timestamp and an
event name: the producer a producer_send_success (key, value, topic, partition, offset) or
producer_send_error per record and a closing tool_data (sent, acked); the consumer its
partitions_assigned/revoked, a records_consumed summary per poll (with --verbose a record_data
per record before it) and an offsets_committed per commit (it commits synchronously after
every poll)."""
import datetime
import json
import os
import re
import subprocess
import tempfile
import threading
import unittest

from peers import KAFKA, TargetTestCase, require_peers, wait_until

NOT_IDEMPOTENT = ("--command-property", "enable.idempotence=false")
# What Kafka's system tests give the verifiable producer for an idempotent run: its own
# default, retries=0, turns the Java producer's default idempotence off.
IDEMPOTENT = "enable.idempotence=true\nretries=2147483647\n"
MB = 1024 * 1024
PARTITIONS = 3

SUMMARY = re.compile(
    r"^(\d+) (steady state )?records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), "
    r"([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, "
    r"(\d+) ms 99th, (\d+) ms 99\.9th\.$")
CONSUMER_PERF_HEADER = ["start.time", "end.time", "data.consumed.in.MB", "MB.sec",
                        "data.consumed.in.nMsg", "nMsg.sec", "rebalance.time.ms",
                        "fetch.time.ms", "fetch.MB.sec", "fetch.nMsg.sec"]
CONSUMER_PERF_TIMEOUT = "WARNING: Exiting before consuming the expected number of records"


def events(text, tool):
    """The JSON events of a verifiable tool's stdout: every line one object with a timestamp
    and a name."""
    result = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"{tool} printed a line that is not JSON: {line!r}")
        if not isinstance(event.get("timestamp"), int) or not isinstance(event.get("name"),
                                                                          str):
            raise AssertionError(f"{tool} printed an event without timestamp or name: {line}")
        result.append(event)
    return result


def end_offsets(acked):
    """Each partition's end offset after the acked records {value: (partition, offset, key)}
    of one producer run."""
    ends = {}
    for p, offset, _ in acked.values():
        ends[p] = max(ends.get(p, 0), offset + 1)
    return ends


def held_partitions(evs):
    """The partitions a verifiable consumer holds after the events `evs`."""
    held = set()
    for e in evs:
        if e["name"] == "partitions_assigned":
            held |= {p["partition"] for p in e["partitions"]}
        elif e["name"] == "partitions_revoked":
            held -= {p["partition"] for p in e["partitions"]}
    return held


class Background:
    """A verifiable consumer run in the background until it exits or is stopped (SIGTERM, its
    shutdown hook closes the consumer), its stdout gathered as it comes."""

    def __init__(self, *args):
        require_peers()
        self.args = args
        self.err = tempfile.TemporaryFile(mode="w+", errors="replace")
        self.out = []
        self.lock = threading.Lock()
        # scripts/peers/kafka execs the JVM: this PID is the tool's.
        self.proc = subprocess.Popen([KAFKA, "tool", "kafka-verifiable-consumer", *args],
                                     stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.out.append(line)

    def text(self):
        with self.lock:
            return "".join(self.out)

    def stderr(self, chars=4000):
        if self.err.closed:
            return ""
        self.err.seek(0)
        return self.err.read()[-chars:]

    def events(self):
        with self.lock:  # the last line may be half written
            lines = [l for l in self.out if l.endswith("\n")]
        return events("".join(lines), "kafka-verifiable-consumer")

    def stop(self, timeout=60):
        """SIGTERM, then at most `timeout` seconds for the consumer to close; the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.wait(timeout)

    def wait(self, timeout):
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # the JVM this test started, by its Popen
            self.proc.wait(timeout=30)
            self.reader.join(timeout=30)
            self.proc.stdout.close()
            raise AssertionError(f"kafka-verifiable-consumer {' '.join(self.args)}: no exit "
                                 f"within {timeout}s\nstdout: {self.text()[-4000:]}\n"
                                 f"stderr: {self.stderr()}")
        self.reader.join(timeout=30)
        self.proc.stdout.close()
        self.err.close()
        return code


class ConsumerRun:
    """What one verifiable consumer did, checked event by event: the records it consumed, in
    the partitions it held at the time, each poll's records_consumed summary matching its
    record_data lines, every commit a success that commits exactly the poll's next offsets."""

    def __init__(self, test, evs, topic):
        self.records = []  # (partition, offset, key, value), in the order consumed
        self.committed = {}  # partition -> the last offset committed
        self.assigned = set()  # the partitions held at the end
        self.ever_assigned = set()
        test.assertTrue(evs, "no events")
        test.assertEqual(evs[0]["name"], "startup_complete", evs[0])
        pending = []  # record_data since the last records_consumed
        last_poll = None  # partition -> next offset, of the last records_consumed
        for e in evs[1:]:
            name = e["name"]
            if name in ("partitions_assigned", "partitions_revoked"):
                parts = set()
                for p in e["partitions"]:
                    test.assertEqual(p["topic"], topic, e)
                    parts.add(p["partition"])
                if name == "partitions_assigned":
                    self.assigned |= parts
                    self.ever_assigned |= parts
                else:
                    self.assigned -= parts
            elif name == "record_data":
                test.assertEqual(e["topic"], topic, e)
                test.assertIn(e["partition"], self.assigned, f"{e} outside the assignment")
                pending.append((e["partition"], e["offset"], e["key"], e["value"]))
            elif name == "records_consumed":
                by_partition = {}
                for r in pending:
                    by_partition.setdefault(r[0], []).append(r[1])
                summaries = {}
                for s in e["partitions"]:
                    test.assertEqual(s["topic"], topic, e)
                    summaries[s["partition"]] = (s["count"], s["minOffset"], s["maxOffset"])
                test.assertEqual(summaries, {p: (len(o), o[0], o[-1])
                                             for p, o in by_partition.items()}, e)
                for p, offsets in by_partition.items():  # in order, without gaps
                    test.assertEqual(offsets, list(range(offsets[0], offsets[-1] + 1)), p)
                # count: the whole poll's records, of which --max-messages may take fewer.
                test.assertGreaterEqual(e["count"], len(pending), e)
                self.records += pending
                pending = []
                last_poll = {p: o[-1] + 1 for p, o in by_partition.items()}
            elif name == "offsets_committed":
                test.assertIs(e["success"], True, e)
                test.assertNotIn("error", e)
                offsets = {}
                for o in e["offsets"]:
                    test.assertEqual(o["topic"], topic, e)
                    offsets[o["partition"]] = o["offset"]
                test.assertEqual(offsets, last_poll, f"{e}: not the last poll's offsets")
                self.committed.update(offsets)
            else:
                test.assertIn(name, ("shutdown_requested", "shutdown_complete"), e)
        test.assertEqual(pending, [], "record_data without its records_consumed")
        test.assertIn("shutdown_complete", [e["name"] for e in evs], "no shutdown_complete")


class PerfAndVerifiableToolsTest(TargetTestCase):
    def create(self, topic):
        self.tool("kafka-topics", "--create", "--topic", topic, "--partitions", str(PARTITIONS))

    def end_offsets(self, topic):
        out = self.tool("kafka-get-offsets", "--topic", topic).stdout
        result = {}
        for line in out.splitlines():
            m = re.match(r"^.+:(\d+):(\d+)$", line.strip())
            if m:
                result[int(m.group(1))] = int(m.group(2))
        return result

    # ---------------------------------------------------------------- the perf tests

    def producer_perf(self, topic, count, size, *extra):
        """Runs kafka-producer-perf-test; its summary lines, parsed (the steady state one too
        with --warmup-records), each checked for sense."""
        out = self.tool("kafka-producer-perf-test", "--topic", topic, "--num-records",
                        str(count), "--record-size", str(size), "--throughput", "-1", *extra,
                        timeout=180)
        summaries = []
        for line in out.stdout.splitlines():
            m = SUMMARY.match(line)
            if not m:
                continue
            s = {"records": int(m.group(1)), "steady": bool(m.group(2)),
                 "rate": float(m.group(3)), "mb_rate": float(m.group(4)),
                 "avg": float(m.group(5)), "max": float(m.group(6)),
                 "percentiles": [int(m.group(i)) for i in range(7, 11)]}
            self.assertGreater(s["rate"], 0, line)
            # MB/sec: the values' bytes (not the keys'), in MiB, to two decimals.
            self.assertAlmostEqual(s["mb_rate"], s["rate"] * size / MB, delta=0.0051, msg=line)
            self.assertLessEqual(s["avg"], s["max"], line)
            self.assertEqual(s["percentiles"], sorted(s["percentiles"]), line)
            self.assertLessEqual(s["percentiles"][-1], s["max"], line)
            summaries.append(s)
        self.assertNotIn("Exception", out.stderr)
        return summaries

    def consumer_perf(self, topic, count, group, *extra, timeout_ms=30000):
        """Runs kafka-consumer-perf-test; its one line of stats as a dict by the header's
        field names, and whether it stopped for its --timeout."""
        out = self.tool("kafka-consumer-perf-test", "--topic", topic, "--num-records",
                        str(count), "--group", group, "--timeout", str(timeout_ms), *extra,
                        timeout=180)
        lines = [l for l in out.stdout.splitlines() if not l.startswith(CONSUMER_PERF_TIMEOUT)]
        timed_out = len(lines) < len(out.stdout.splitlines())
        self.assertEqual(len(lines), 2, out.stdout)
        self.assertEqual(lines[0].split(", "), CONSUMER_PERF_HEADER)
        fields = dict(zip(CONSUMER_PERF_HEADER, lines[1].split(", ")))
        self.assertEqual(len(fields), len(CONSUMER_PERF_HEADER), lines[1])
        start, end = (datetime.datetime.strptime(fields[f], "%Y-%m-%d %H:%M:%S:%f")
                      for f in ("start.time", "end.time"))
        self.assertLessEqual(start, end, lines[1])
        stats = {"mb": float(fields["data.consumed.in.MB"]),
                 "records": int(fields["data.consumed.in.nMsg"]),
                 "rebalance_ms": int(fields["rebalance.time.ms"]),
                 "fetch_ms": int(fields["fetch.time.ms"])}
        self.assertGreaterEqual(stats["rebalance_ms"], 0, lines[1])
        self.assertGreaterEqual(stats["fetch_ms"], 0, lines[1])
        self.assertNotIn("Exception", out.stderr)
        return stats, timed_out

    def check_producer_perf(self, topic, *extra):
        self.create(topic)
        # Keys 0..29 in turn: every partition gets some (the client's murmur2 picks them).
        summaries = self.producer_perf(topic, 3000, 100, "--key-distribution", "range",
                                       "--record-key-range", "30", "--warmup-records", "1000",
                                       *extra)
        self.assertEqual([(s["records"], s["steady"]) for s in summaries],
                         [(3000, False), (2000, True)])
        ends = self.end_offsets(topic)
        self.assertEqual(sorted(ends), list(range(PARTITIONS)))
        self.assertEqual(sum(ends.values()), 3000, ends)
        self.assertTrue(all(ends.values()), ends)

    def test_producer_perf_test_sends_every_record(self):
        # enable.idempotence=false: the idempotent default needs InitProducerId (see below).
        self.check_producer_perf(self.topic(), *NOT_IDEMPOTENT)

    def test_producer_perf_test_default_idempotent_producer(self):
        self.check_producer_perf(self.topic())

    def check_consumer_perf(self, topic, group, *extra):
        self.create(topic)
        self.producer_perf(topic, 3000, 100, "--key-distribution", "range",
                           "--record-key-range", "30", *NOT_IDEMPOTENT)
        stats, timed_out = self.consumer_perf(topic, 3000, group, *extra)
        self.assertFalse(timed_out)
        self.assertEqual(stats["records"], 3000)
        # Bytes read: 100 per value and the keys' "0".."29", 5000 bytes in all, in MiB.
        self.assertEqual(stats["mb"], round((3000 * 100 + 5000) / MB, 4))
        # The tool commits what it read (auto commit, and on close): the group resumes at
        # the end, with nothing to read before its --timeout.
        stats, timed_out = self.consumer_perf(topic, 1, group, *extra, timeout_ms=2000)
        self.assertTrue(timed_out)
        self.assertEqual((stats["records"], stats["mb"]), (0, 0.0))

    def test_consumer_perf_test_classic_group(self):
        self.check_consumer_perf(self.topic(), self.topic("-group"))

    def test_consumer_perf_test_consumer_group(self):
        # group.protocol=consumer: KIP-848's ConsumerGroupHeartbeat instead of Join/SyncGroup.
        self.check_consumer_perf(self.topic(), self.topic("-group"),
                                 "--command-property", "group.protocol=consumer")

    # ---------------------------------------------------------------- the verifiable tools

    def verifiable_produce(self, topic, count, prefix, config=None):
        """Runs kafka-verifiable-producer (keys 0..6 in turn, values prefix.0, prefix.1, ...)
        with its defaults or the producer properties `config`; the acked records as
        {value: (partition, offset, key)}, each checked against what was sent."""
        args = ["--topic", topic, "--max-messages", str(count), "--repeating-keys", "7",
                "--value-prefix", str(prefix)]
        path = None
        if config is not None:
            with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as f:
                f.write(config)
                path = f.name
            args += ["--command-config", path]
        try:
            out = self.tool("kafka-verifiable-producer", *args, timeout=180)
        finally:
            if path:
                os.unlink(path)
        evs = events(out.stdout, "kafka-verifiable-producer")
        names = [e["name"] for e in evs]
        self.assertEqual(names[0], "startup_complete")
        self.assertEqual(names[-2:], ["shutdown_complete", "tool_data"], names[-5:])
        errors = [e for e in evs if e["name"] == "producer_send_error"]
        self.assertEqual(errors[:3], [])
        tool_data = evs[-1]
        self.assertEqual((tool_data["sent"], tool_data["acked"]), (count, count), tool_data)
        acked = {}
        per_partition = {}
        for e in evs[1:-2]:
            self.assertEqual(e["name"], "producer_send_success", e)
            self.assertEqual(e["topic"], topic, e)
            self.assertNotIn(e["value"], acked, f"{e}: acked twice")
            acked[e["value"]] = (e["partition"], e["offset"], e["key"])
            per_partition.setdefault(e["partition"], []).append(e)
        self.assertEqual(sorted(acked), sorted(f"{prefix}.{i}" for i in range(count)))
        for i in range(count):
            self.assertEqual(acked[f"{prefix}.{i}"][2], str(i % 7))
        # A key in one partition; a partition's records in the order sent (retries=0 or
        # idempotence), at offsets without gaps.
        partition_of = {}
        for p, offset, key in acked.values():
            self.assertEqual(partition_of.setdefault(key, p), p, f"key {key} in two partitions")
        for p, es in per_partition.items():
            seq = [int(e["value"].split(".")[1]) for e in es]
            self.assertEqual(seq, sorted(seq), f"partition {p} out of order")
            offsets = [e["offset"] for e in es]
            self.assertEqual(offsets, list(range(offsets[0], offsets[0] + len(offsets))))
        return acked

    def verifiable_consumer(self, topic, group, protocol, *extra):
        return ("--topic", topic, "--group-id", group, "--group-protocol", protocol,
                "--verbose", *extra)

    def wait_for(self, members, predicate, what, timeout=120):
        try:
            wait_until(predicate, timeout, what)
        except TimeoutError as e:
            raise AssertionError("\n".join([str(e)] + [
                f"member {i}: stdout: {m.text()[-3000:]}\nstderr: {m.stderr()}"
                for i, m in enumerate(members)]))

    def check_verifiable_group(self, protocol):
        topic, group = self.topic(), self.topic("-group")
        self.create(topic)
        # Two members of one group, started before there is anything to read: each ends up
        # with partitions of its own (classic: eager revoke-all then assign; consumer:
        # incremental, a partition only once its former owner revoked it).
        args = self.verifiable_consumer(topic, group, protocol)
        members = [Background("--bootstrap-server", self.bootstrap, *args) for _ in range(2)]
        try:
            def split():
                held = [held_partitions(m.events()) for m in members]
                return (all(held) and not held[0] & held[1]
                        and held[0] | held[1] == set(range(PARTITIONS)))
            self.wait_for(members, split, "the two members splitting the partitions")
            first = self.verifiable_produce(topic, 2000, 1)
            wanted = set(first)

            def consumed_all():
                seen = set()
                for m in members:
                    seen |= {e["value"] for e in m.events() if e["name"] == "record_data"}
                return seen >= wanted
            self.wait_for(members, consumed_all, "the members consuming every acked record")
        finally:
            for m in members:
                m.stop()
        runs = [ConsumerRun(self, m.events(), topic) for m in members]
        for run in runs:
            self.assertTrue(run.records, "a member consumed nothing")
        # The split held from the first record on: no partition read by both.
        read_by = [{p for p, _, _, _ in run.records} for run in runs]
        self.assertFalse(read_by[0] & read_by[1], read_by)
        # Every acked record consumed exactly once in the group, as acked.
        consumed = [r for run in runs for r in run.records]
        self.assertEqual(len(consumed), len(first), "duplicates")
        self.assertEqual({v: (p, o, k) for p, o, k, v in consumed}, first)
        # What the members committed last: each partition's end.
        committed = {}
        for run in runs:
            for p, o in run.committed.items():
                committed[p] = max(committed.get(p, 0), o)
        ends = end_offsets(first)
        self.assertEqual(committed, ends)

        # A member restarted in the group resumes at the committed offsets: it reads the
        # records produced since, each once, and stops after as many (--max-messages).
        second = self.verifiable_produce(topic, 500, 2)
        out = self.tool("kafka-verifiable-consumer",
                        *self.verifiable_consumer(topic, group, protocol, "--max-messages",
                                                  "500"), timeout=180)
        run = ConsumerRun(self, events(out.stdout, "kafka-verifiable-consumer"), topic)
        self.assertEqual(run.ever_assigned, set(range(PARTITIONS)))
        self.assertEqual(len(run.records), 500)
        self.assertEqual({v: (p, o, k) for p, o, k, v in run.records}, second)
        first_read = {}
        for p, o, _, _ in run.records:
            first_read.setdefault(p, o)
        self.assertEqual(first_read, {p: ends[p] for p in first_read})
        self.assertEqual(run.committed, {**ends, **end_offsets(second)})

    def test_verifiable_producer_and_consumers_classic_group(self):
        self.check_verifiable_group("classic")

    def test_verifiable_producer_and_consumers_consumer_group(self):
        # --group-protocol consumer: KIP-848 (ConsumerGroupHeartbeat), server-side assignor.
        self.check_verifiable_group("consumer")

    def test_verifiable_producer_idempotent(self):
        topic = self.topic()
        self.create(topic)
        acked = self.verifiable_produce(topic, 300, 1, config=IDEMPOTENT)
        ends = self.end_offsets(topic)
        self.assertEqual(sum(ends.values()), 300)
        for p, offset, _ in acked.values():
            self.assertLess(offset, ends[p])


if __name__ == "__main__":
    unittest.main()
