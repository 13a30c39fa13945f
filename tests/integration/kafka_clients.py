"""The produce/consume tests' targets and Kafka clients.

A target is what the clients talk to: a Runnel node (the default, what CTest runs), or
librdkafka's in-memory mock cluster when RUNNEL_TEST_TARGET=mock, which lets the tests be
developed before the broker's data path exists. Tests that need what the mock cannot do
skip themselves on it (skip_on_mock).

Every client is driven the same way: produce(records) gives one delivery report per record
(or None where the client cannot tell, like kcat), consume({partition: (offset, count)})
gives the records read back, both as plain Python values, so a test checks every client
with the same code. Only processes started here are stopped, by their handle; every wait
is bounded.
"""
import array
import fcntl
import hashlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
import unittest
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from harness import BIN_DIR, Node, wait_until

TARGET = os.environ.get("RUNNEL_TEST_TARGET", "runnel")
IS_MOCK = TARGET == "mock"
HERE = os.path.dirname(os.path.abspath(__file__))

CREATE_TIME = 1  # librdkafka's numbering, which every client's answer is mapped to
LOG_APPEND_TIME = 2


def skip_on_mock(reason):
    return unittest.skipIf(IS_MOCK, f"not on librdkafka's mock cluster: {reason}")


# ---- targets ------------------------------------------------------------------------------

class MockTarget:
    """librdkafka's mock cluster in a process of its own (tests/integration/it_mock_cluster.c)."""
    is_mock = True

    def __init__(self, extra_config=None):
        self.proc = subprocess.Popen([os.path.join(BIN_DIR, "it_mock_cluster")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self._read_line(20)
        if not line.startswith("bootstrap "):
            raise RuntimeError(f"it_mock_cluster said {line!r}")
        self.bootstrap = line.split()[1]

    def _read_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError("it_mock_cluster did not answer")
        return self.proc.stdout.readline().strip()

    def create_topic(self, name, partitions=1, config=None):
        # The mock has no topic configs: max.message.bytes and the like are not enforced.
        self.proc.stdin.write(f"topic {name} {partitions}\n")
        self.proc.stdin.flush()
        answer = self._read_line(10)
        if answer != "ok":
            raise RuntimeError(f"mock topic {name}: {answer}")

    def brokerd_pid(self):
        return None

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc.stdout.close()


class RunnelTarget:
    """One Runnel node (harness.Node)."""
    is_mock = False

    def __init__(self, extra_config=None):
        self.node = Node(extra_config).start()

    @property
    def bootstrap(self):
        return self.node.bootstrap

    def create_topic(self, name, partitions=1, config=None):
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics(
            [NewTopic(name, partitions, 1, config=dict(config or {}))], operation_timeout=20)
        futures[name].result(timeout=30)
        # Metadata follows the controller's log: wait until this broker knows every partition.
        wait_until(lambda: len(admin.list_topics(name, timeout=5).topics[name].partitions) ==
                   partitions, 20, f"topic {name} in the metadata")

    def brokerd_pid(self):
        return self.node.status()["brokerd"]["pid"]

    def cleanup(self):
        self.node.cleanup()


def start_target(extra_config=None):
    return MockTarget(extra_config) if IS_MOCK else RunnelTarget(extra_config)


# ---- records ------------------------------------------------------------------------------

@dataclass
class Rec:
    """A record to produce. partition None: the client's partitioner picks; timestamp None:
    the client stamps it."""
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, bytes]] = field(default_factory=list)
    timestamp: Optional[int] = None
    partition: Optional[int] = None


@dataclass
class Got:
    """A record read back."""
    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, bytes]]
    timestamp: int
    timestamp_type: int


@dataclass
class Delivery:
    error: str  # "NO_ERROR" or the client's name for the error
    partition: int
    offset: int


def _hex(b):
    return "-" if b is None else b.hex()


def _unhex(s):
    return None if s == "-" else bytes.fromhex(s)


def record_line(r):
    """A record as rdkafka_client.cc and kafkajs_client.js read it."""
    headers = ",".join(f"{k.encode().hex()}={v.hex()}" for k, v in r.headers)
    partition = -1 if r.partition is None else r.partition
    return f"{partition}\t{r.timestamp or 0}\t{_hex(r.key)}\t{_hex(r.value)}\t{headers}\n"


def parse_got_line(line):
    p, off, ts_type, ts, key, value, headers = line.rstrip("\n").split("\t")
    hs = []
    if headers:
        for h in headers.split(","):
            k, v = h.split("=")
            hs.append((bytes.fromhex(k).decode(), _unhex(v)))
    return Got(int(p), int(off), _unhex(key), _unhex(value), hs, int(ts), int(ts_type))


def parse_deliveries(stdout, n):
    out = [None] * n
    for line in stdout.splitlines():
        if not line.strip():
            continue
        i, err, p, off = line.split("\t")
        out[int(i)] = Delivery(err, int(p), int(off))
    return out


def wants_arg(wants):
    return ",".join(f"{p}:{off}:{count}" for p, (off, count) in sorted(wants.items()))


# ---- clients ------------------------------------------------------------------------------

class Client:
    name = "?"
    can_set_timestamp = True
    per_record_headers = True
    binary_values = True
    null_key_empty_value = True
    null_key_null_value = True
    codecs = ("none", "gzip", "snappy", "lz4", "zstd")

    def produce(self, bootstrap, topic, records, compression="none", acks="all", config=None):
        raise NotImplementedError

    def consume(self, bootstrap, topic, wants, timeout=60):
        raise NotImplementedError


class RdkafkaProgram(Client):
    """librdkafka's C or C++ API through rdkafka_client.cc."""

    def __init__(self, api):
        self.api = api
        self.name = f"librdkafka-{api}"

    def _run(self, args, stdin, timeout):
        return subprocess.run([os.path.join(BIN_DIR, "rdkafka_client"), self.api, *args],
                              input=stdin, capture_output=True, text=True, timeout=timeout)

    def produce(self, bootstrap, topic, records, compression="none", acks="all", config=None):
        props = {"compression.type": compression, "acks": acks, "message.max.bytes": "3000000",
                 "linger.ms": "20", "test.timeout.ms": "60000"}
        props.update(config or {})
        out = self._run(["produce", bootstrap, topic, *[f"{k}={v}" for k, v in props.items()]],
                        "".join(record_line(r) for r in records), 120)
        if out.returncode not in (0, 1):
            raise AssertionError(f"{self.name} produce failed: {out.stderr}")
        return parse_deliveries(out.stdout, len(records))

    def consume(self, bootstrap, topic, wants, timeout=60, config=None):
        props = {"test.timeout.ms": str(timeout * 1000)}
        props.update(config or {})
        out = self._run(["consume", bootstrap, topic, wants_arg(wants),
                         *[f"{k}={v}" for k, v in props.items()]], "", timeout + 30)
        if out.returncode != 0:
            raise AssertionError(f"{self.name} consume: {out.stderr[-3000:]}")
        return [parse_got_line(l) for l in out.stdout.splitlines() if l.strip()]


class ConfluentKafka(Client):
    """python3-confluent-kafka (librdkafka underneath)."""
    name = "confluent-kafka"

    def produce(self, bootstrap, topic, records, compression="none", acks="all", config=None):
        from confluent_kafka import Producer
        conf = {"bootstrap.servers": bootstrap, "compression.type": compression, "acks": acks,
                "message.max.bytes": 3000000, "linger.ms": 20}
        conf.update(config or {})
        p = Producer(conf)
        out = [None] * len(records)

        def report(i):
            def cb(err, msg):
                out[i] = Delivery("NO_ERROR" if err is None else err.name(), msg.partition(),
                                  msg.offset() if err is None else -1)
            return cb

        for i, r in enumerate(records):
            kwargs = {"value": r.value, "key": r.key, "headers": r.headers or None,
                      "on_delivery": report(i)}
            if r.partition is not None:
                kwargs["partition"] = r.partition
            if r.timestamp:
                kwargs["timestamp"] = r.timestamp
            p.produce(topic, **kwargs)
            p.poll(0)
        left = p.flush(60)
        if left:
            raise AssertionError(f"{left} records not delivered within 60 s")
        return out

    def consume(self, bootstrap, topic, wants, timeout=60, config=None):
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        # confluent-kafka insists on a group id; assign() uses no group: no join, no commits.
        conf = {"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                "enable.auto.commit": False, "enable.partition.eof": False}
        conf.update(config or {})
        c = Consumer(conf)
        try:
            c.assign([TopicPartition(topic, p, off) for p, (off, n) in wants.items() if n > 0])
            left = {p: n for p, (off, n) in wants.items() if n > 0}
            got = []
            deadline = time.monotonic() + timeout
            while sum(left.values()) > 0 and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consume error: {msg.error()}")
                if left.get(msg.partition(), 0) == 0:
                    continue
                left[msg.partition()] -= 1
                ts_type, ts = msg.timestamp()
                got.append(Got(msg.partition(), msg.offset(), msg.key(), msg.value(),
                               list(msg.headers() or []), ts, ts_type))
            if sum(left.values()) > 0:
                raise AssertionError(f"{self.name}: records missing after {timeout} s: {left}")
            return got
        finally:
            c.close()


class KafkaPython(Client):
    """python3-kafka (kafka-python), a pure Python client."""
    name = "kafka-python"
    null_key_null_value = False  # send() asserts "Need at least one: key or value"

    def codec_missing(self, codec):
        """Why kafka-python cannot use `codec` here, or None."""
        from kafka import codec as kc
        have = {"none": True, "gzip": True, "snappy": kc.has_snappy(), "lz4": kc.has_lz4(),
                "zstd": kc.has_zstd()}
        return None if have[codec] else f"kafka-python has no {codec} library installed"

    def produce(self, bootstrap, topic, records, compression="none", acks="all", config=None):
        from kafka import KafkaProducer
        conf = {"bootstrap_servers": bootstrap, "acks": acks,
                "compression_type": None if compression == "none" else compression,
                "max_request_size": 3000000, "linger_ms": 20, "request_timeout_ms": 30000}
        conf.update(config or {})
        p = KafkaProducer(**conf)
        try:
            futures = [p.send(topic, value=r.value, key=r.key, headers=r.headers,
                              partition=r.partition, timestamp_ms=r.timestamp) for r in records]
            p.flush(timeout=60)
            out = []
            for f in futures:
                try:
                    md = f.get(timeout=60)
                    out.append(Delivery("NO_ERROR", md.partition, md.offset))
                except Exception as e:  # the future carries the broker's error
                    out.append(Delivery(type(e).__name__, -1, -1))
            return out
        finally:
            p.close(timeout=10)

    def consume(self, bootstrap, topic, wants, timeout=60, config=None):
        from kafka import KafkaConsumer, TopicPartition
        conf = {"bootstrap_servers": bootstrap, "group_id": None, "enable_auto_commit": False,
                "fetch_max_wait_ms": 200}
        conf.update(config or {})
        c = KafkaConsumer(**conf)
        try:
            tps = {p: TopicPartition(topic, p) for p, (off, n) in wants.items() if n > 0}
            c.assign(list(tps.values()))
            for p, tp in tps.items():
                c.seek(tp, wants[p][0])
            left = {p: wants[p][1] for p in tps}
            got = []
            deadline = time.monotonic() + timeout
            while sum(left.values()) > 0 and time.monotonic() < deadline:
                for tp, recs in c.poll(timeout_ms=500).items():
                    for r in recs:
                        if left[tp.partition] == 0:
                            continue
                        left[tp.partition] -= 1
                        got.append(Got(tp.partition, r.offset, r.key, r.value, list(r.headers),
                                       r.timestamp, r.timestamp_type + 1))
            if sum(left.values()) > 0:
                raise AssertionError(f"{self.name}: records missing after {timeout} s: {left}")
            return got
        finally:
            c.close()


class Kcat(Client):
    """kcat: one process per run of records that share a partition and headers; it cannot
    set timestamps or report offsets, and its values are text lines."""
    name = "kcat"
    can_set_timestamp = False
    per_record_headers = False
    binary_values = False
    null_key_empty_value = False  # an empty line is no record at all
    null_key_null_value = False

    def _base(self, bootstrap, topic):
        return ["kcat", "-b", bootstrap, "-t", topic, "-q", "-X", "message.max.bytes=3000000"]

    def produce(self, bootstrap, topic, records, compression="none", acks="all", config=None):
        runs = []
        for r in records:
            # a null value needs -Z (empty lines become nulls), a big one is sent from a file
            kind = ("null" if r.value is None else
                    "file" if len(r.value) > 65536 or b"\n" in r.value else "line")
            key = (r.partition, tuple(r.headers), kind)
            if runs and runs[-1][0] == key and kind != "file":
                runs[-1][1].append(r)
            else:
                runs.append((key, [r]))
        tmp = tempfile.mkdtemp(prefix="rnl-kcat-", dir="/tmp")
        try:
            for (partition, headers, kind), recs in runs:
                args = self._base(bootstrap, topic) + [
                    "-P", "-X", f"compression.codec={compression}", "-X", "acks=all"]
                if partition is not None:
                    args += ["-p", str(partition)]
                for k, v in headers:
                    args += ["-H", f"{k}={v.decode()}"]
                stdin = ""
                if kind == "file":
                    path = os.path.join(tmp, "value")
                    with open(path, "wb") as f:
                        f.write(recs[0].value)
                    if recs[0].key is not None:
                        args += ["-k", recs[0].key.decode()]
                    args.append(path)
                else:
                    if kind == "null":
                        args.append("-Z")
                    args += ["-K", "\\t"]
                    for r in recs:
                        value = (r.value or b"").decode()
                        if r.key is None:
                            if not value:
                                raise ValueError("kcat cannot send a null key with an empty value")
                            stdin += value + "\n"
                        else:
                            stdin += r.key.decode() + "\t" + value + "\n"
                out = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=60)
                if out.returncode != 0:
                    raise AssertionError(f"kcat -P failed: {out.stderr}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return None

    def consume(self, bootstrap, topic, wants, timeout=60):
        got = []
        for p, (off, n) in sorted(wants.items()):
            if n == 0:
                continue
            out = subprocess.run(self._base(bootstrap, topic) +
                                 ["-C", "-p", str(p), "-o", str(off), "-c", str(n), "-e", "-J"],
                                 capture_output=True, text=True, timeout=timeout)
            if out.returncode != 0:
                raise AssertionError(f"kcat -C failed: {out.stderr}")
            for line in out.stdout.splitlines():
                if not line.startswith("{"):
                    continue
                j = json.loads(line)
                hs = j.get("headers") or []
                if isinstance(hs, dict):
                    hs = [x for kv in hs.items() for x in kv]
                headers = [(hs[i], None if hs[i + 1] is None else hs[i + 1].encode())
                           for i in range(0, len(hs), 2)]
                got.append(Got(j["partition"], j["offset"],
                               None if j["key"] is None else j["key"].encode(),
                               None if j["payload"] is None else j["payload"].encode(),
                               headers, j["ts"],
                               {"create": CREATE_TIME, "logappend": LOG_APPEND_TIME}.get(
                                   j["tstype"], 0)))
        return got


# ---- KafkaJS ------------------------------------------------------------------------------

NPM_TIMEOUT = 300


def kafkajs_dir():
    """Where tests/integration/package.json's packages are installed: beside the build's
    bin/ (or RUNNEL_NODE_DIR), by `npm ci` from the lock file, once per lock file."""
    base = os.environ.get("RUNNEL_NODE_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(BIN_DIR)), "node-kafkajs")
    return base


def ensure_kafkajs():
    """Installs KafkaJS and its codecs if the lock file changed; returns NODE_PATH.
    Raises unittest.SkipTest when node or npm is missing from the machine."""
    if not shutil.which("node") or not shutil.which("npm"):
        raise unittest.SkipTest("node and npm are not installed")
    base = kafkajs_dir()
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(HERE, "package-lock.json"), "rb") as f:
        stamp = hashlib.sha256(f.read()).hexdigest()
    stamp_path = os.path.join(base, "installed.sha256")
    with open(os.path.join(base, ".lock"), "w") as lock:
        # Two test files may start at once under ctest -j: one installs, the other waits.
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
                return os.path.join(base, "node_modules")
            for name in ("package.json", "package-lock.json"):
                shutil.copy(os.path.join(HERE, name), os.path.join(base, name))
            out = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                                 cwd=base, capture_output=True, text=True, timeout=NPM_TIMEOUT)
            if out.returncode != 0:
                raise AssertionError(f"npm ci failed:\n{out.stdout}\n{out.stderr}")
            with open(stamp_path, "w") as f:
                f.write(stamp)
            return os.path.join(base, "node_modules")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class KafkaJS(Client):
    """KafkaJS through kafkajs_client.js; it reads without a consumer group through its
    own Fetch path (the broker object of its cluster), as it has no assign()."""
    name = "kafkajs"

    def __init__(self):
        self.node_path = ensure_kafkajs()

    def _run(self, args, stdin, timeout):
        env = dict(os.environ, NODE_PATH=self.node_path, KAFKAJS_NO_PARTITIONER_WARNING="1")
        return subprocess.run(["node", os.path.join(HERE, "kafkajs_client.js"), *args],
                              input=stdin, capture_output=True, text=True, timeout=timeout,
                              env=env)

    def produce(self, bootstrap, topic, records, compression="none", acks="all", config=None):
        opts = {"compression": compression, "acks": -1 if acks == "all" else int(acks)}
        opts.update(config or {})
        out = self._run(["produce", bootstrap, topic, json.dumps(opts)],
                        "".join(record_line(r) for r in records), 120)
        if out.returncode != 0:
            raise AssertionError(f"kafkajs produce failed: {out.stderr[-3000:]}")
        return parse_deliveries(out.stdout, len(records))

    def consume(self, bootstrap, topic, wants, timeout=60):
        out = self._run(["consume", bootstrap, topic, wants_arg(wants),
                         json.dumps({"timeoutMs": timeout * 1000})], "", timeout + 30)
        if out.returncode != 0:
            raise AssertionError(f"kafkajs consume failed: {out.stderr[-3000:]}")
        return [parse_got_line(l) for l in out.stdout.splitlines() if l.strip()]


def all_clients():
    return [RdkafkaProgram("c"), RdkafkaProgram("cpp"), ConfluentKafka(), KafkaPython(), Kcat()]


# ---- rdkafka_client seq-produce / seq-consume ---------------------------------------------

def seq_summary(line):
    """{"acked": 5, ...} of a "done acked=5 ..." line."""
    return {k: int(v) if v.isdigit() else v for k, v in
            (f.split("=", 1) for f in line.split() if "=" in f)}


def read_seqs(path):
    """The sequence numbers (uint64, little endian) seq-produce or seq-consume wrote."""
    seqs = array.array("Q")
    with open(path, "rb") as f:
        seqs.frombytes(f.read())
    return seqs
