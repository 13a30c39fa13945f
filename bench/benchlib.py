"""What bench/kafka-vs-mock, bench/kafka-vs-kafka and bench/partitions share: the targets (a
Runnel node, a mock_cluster, an Apache Kafka 4.4 node from scripts/peers/kafka's cache), the
kafka_perf runner, and a Bench base with the cases, the settling of freed pages, the raw
write(2) reference, the per-round records and the table.

Only processes the scripts started are signalled, by PID; every wait is bounded.
"""
import contextlib
import importlib.machinery
import importlib.util
import json
import os
import random
import resource
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024
GIB = 1024 * MIB


def proc_cpu_seconds(pid):
    """utime+stime of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def proc_rss_bytes(pid):
    """Resident set size of a process (VmRSS of /proc/<pid>/status), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


class RssSampler:
    """Samples the summed RSS of some processes every `interval` seconds on a thread, from
    entering to leaving the `with`; `peak` is the largest sum seen."""

    def __init__(self, pids, interval):
        self.pids = list(pids)
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        self.peak = max(self.peak, sum(proc_rss_bytes(p) for p in self.pids))

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample()
        return False


def wait_until(predicate, timeout, what, interval=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as e:  # the thing waited for may raise until it is ready
            last = e
        time.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout}s (last error: {last})")


class MockTarget:
    """A mock_cluster process; topics are created through its stdin."""

    def __init__(self, label, bin_dir):
        self.label = label
        self.bin_dir = bin_dir
        self.proc = None
        self.bootstrap = None
        self.start_command = [os.path.join(bin_dir, "mock_cluster")]

    def start(self):
        self.proc = subprocess.Popen(self.start_command, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.bootstrap = self._read_line(30)
        if not self.bootstrap:
            raise RuntimeError(f"{self.label}: mock_cluster printed no bootstrap servers")

    def _read_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"{self.label}: mock_cluster did not answer within {timeout}s")
        return self.proc.stdout.readline().strip()

    def create_topic(self, topic, partitions, perf):
        self.proc.stdin.write(f"create {topic} {partitions}\n")
        self.proc.stdin.flush()
        answer = self._read_line(30)
        if answer != "ok":
            raise RuntimeError(f"{self.label}: create {topic}: {answer}")

    def delete_topic(self, topic, perf):
        """The mock has no topic deletion; it keeps at most 5 MiB per partition. False: no
        page-cache pages were freed."""
        return False

    def server_pids(self):
        return [self.proc.pid]

    def check_alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.label}: mock_cluster exited with {self.proc.returncode}")

    def describe(self):
        return (f"{shlex.join(self.start_command)}   (prints its bootstrap; topics created "
                f"with 'create TOPIC PARTITIONS' on its stdin)")

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.stdin.close()  # EOF on stdin ends it
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        self.proc = None


def harness(bin_dir):
    """tests/integration/harness.py (it reads RUNNEL_BIN_DIR when imported)."""
    os.environ.setdefault("RUNNEL_BIN_DIR", bin_dir)
    if os.path.join(HERE, "..", "tests", "integration") not in sys.path:
        sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
    import harness as h  # noqa: E402 (needs RUNNEL_BIN_DIR set first)
    return h


class AdminTopics:
    """Topics made and deleted through a Kafka broker's admin API (kafka_perf create-topic,
    delete-topic): a Runnel node, a Kafka node."""

    def create_topic(self, topic, partitions, perf):
        perf.admin("create-topic", self, topic, partitions)

    def delete_topic(self, topic, perf):
        """Only to bound the disk used; a failure here must not hide the run's own result.
        True: the server removes the topic's files (Runnel at once, Kafka from a background
        thread), freeing their page-cache pages."""
        try:
            perf.admin("delete-topic", self, topic)
        except Exception as e:
            print(f"{self.label}: warning: delete {topic}: {str(e).splitlines()[-1]}", flush=True)
        return True


class RunnelTarget(AdminTopics):
    """One Runnel node started with tests/integration/harness.py's Node.

    extra_config: node properties over the harness's (default: log level warn).
    all_processes: the server's CPU and RSS are those of every Runnel process (the supervisor
    and all its role daemons) instead of brokerd and storaged alone."""

    def __init__(self, label, bin_dir, extra_config=None, all_processes=False):
        self.label = label
        self.bin_dir = bin_dir
        if extra_config is None:
            extra_config = {"runnel.log.level": "warn"}
        self.node = harness(bin_dir).Node(extra_config=extra_config, bin_dir=bin_dir)
        self.bootstrap = self.node.bootstrap
        self.port = self.node.port
        self.all_processes = all_processes
        self.restarts = None

    def start(self, wait=True):
        """Starts the supervisor; with wait=False, call ready() once it serves."""
        self.node.start(wait=wait)
        if wait:
            self.ready()

    def ready(self):
        self.node.wait_ready()
        self.restarts = self._restarts()

    def log_dirs(self):
        with open(self.node.config_path) as f:
            for line in f:
                if line.startswith("log.dirs="):
                    return line.split("=", 1)[1].strip().split(",")
        return []

    def _roles(self):
        return self.node.status()

    def _restarts(self):
        return {r: s["restarts"] for r, s in self._roles().items()}

    def server_pids(self):
        roles = self._roles()
        if self.all_processes:
            pids = [self.node.proc.pid] + [s["pid"] for s in roles.values()]
            if len(roles) != 3 or 0 in pids:
                raise RuntimeError(f"{self.label}: not every role is running: {roles}")
            return pids
        pids = [roles[r]["pid"] for r in ("brokerd", "storaged") if r in roles]
        if len(pids) != 2 or 0 in pids:
            raise RuntimeError(f"{self.label}: brokerd/storaged not both running: {roles}")
        return pids

    def check_alive(self):
        if self.node.proc is None or self.node.proc.poll() is not None:
            raise RuntimeError(f"{self.label}: the supervisor exited:\n{self.node.log()[-4000:]}")
        restarts = self._restarts()
        if restarts != self.restarts:
            raise RuntimeError(f"{self.label}: a role restarted ({self.restarts} -> {restarts}):"
                               f"\n{self.node.log()[-4000:]}")

    def describe(self):
        with open(self.node.config_path) as f:
            config = " ".join(l.strip() for l in f if l.strip())
        return (f"{os.path.join(self.bin_dir, 'runnel')} --config {self.node.config_path}   "
                f"({config})")

    def stop(self):
        self.node.cleanup()


class Perf:
    """Runs kafka_perf and keeps the exact commands it ran."""

    def __init__(self, bin_dir, verbose):
        self.exe = os.path.join(bin_dir, "kafka_perf")
        self.verbose = verbose
        self.commands = {}  # case -> command with the bootstrap as $BOOTSTRAP

    def run(self, case, target, args, timeout=600):
        cmd = [self.exe, args[0], "--bootstrap", target.bootstrap, *args[1:]]
        self.commands.setdefault(case, shlex.join(cmd).replace(target.bootstrap, "$BOOTSTRAP"))
        if self.verbose:
            print("   $", shlex.join(cmd), flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        result = None
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                result = json.loads(line)
        if self.verbose and out.stderr.strip():
            print("     " + out.stderr.strip().replace("\n", "\n     "), flush=True)
        if out.returncode != 0 or result is None or not result.get("ok", False):
            tail = "\n".join(out.stderr.strip().splitlines()[-8:])
            raise RuntimeError(f"{shlex.join(cmd)} exited {out.returncode}:\n{tail}")
        return result

    def admin(self, command, target, topic, partitions=None):
        args = [command, "--topic", topic]
        if partitions is not None:
            args += ["--partitions", str(partitions)]
        return self.run(command, target, args, timeout=120)


class Bench:
    def __init__(self, args, targets):
        self.args = args
        self.targets = targets  # [subject, reference]
        self.perf = Perf(args.bin_dir, args.verbose)
        self.results = {}  # metric -> label -> {round: value}
        self.round = 0
        self.start_load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        self.failures = []
        self.seq = 0
        self.freed_at = None  # when page-cache pages were last freed (see settle)

    def record(self, metric, label, value, add=False):
        per_round = self.results.setdefault(metric, {}).setdefault(label, {})
        per_round[self.round] = per_round.get(self.round, 0) + value if add else value

    def topic(self, stem):
        self.seq += 1
        return f"{stem}-{self.seq}"

    def delete_topic(self, target, topic):
        if target.delete_topic(topic, self.perf):
            self.freed_at = time.monotonic()

    def settle(self):
        """Waits until --settle-s after pages were last freed (a deleted topic's files, the
        raw write's file). On this kind of VM, freed pages are cheap to use again for a
        second or two, until the balloon reports them to the host: the run after a deletion
        would write into them at a fraction of the usual cost, and the order of the runs
        would decide the figures (a run right after the other target's deleted topic was
        seen at 0.55 s CPU/GiB, one without at 2.5-3.2). Every run starts on settled pages."""
        if self.freed_at is None:
            return
        wait = self.freed_at + self.args.settle_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def measure(self, target, case, args, run=None):
        """One kafka_perf run (or run(), which returns a result dict) with the server's CPU
        time around it, and with --rss-interval-s set, the peak of the server's summed RSS
        sampled during it (result["server_rss_peak"], bytes)."""
        self.settle()
        pids = target.server_pids()
        interval = getattr(self.args, "rss_interval_s", None)
        sampler = RssSampler(pids, interval) if interval else contextlib.nullcontext()
        cpu0 = sum(proc_cpu_seconds(p) for p in pids)
        with sampler:
            result = run() if run else self.perf.run(case, target, args)
        cpu1 = sum(proc_cpu_seconds(p) for p in pids)
        target.check_alive()
        result["server_cpu_s"] = cpu1 - cpu0
        if interval:
            result["server_rss_peak"] = sampler.peak
        return result

    def produced(self, target, case, topic, result):
        """Called after a produce run, before its topic is deleted; returns text for the
        run's line. Nothing here; kafka-vs-kafka measures the topic's bytes on disk."""
        return ""

    def produce_case(self, target, case, record_size, acks, records, perf_args=()):
        """`perf_args`: more kafka_perf produce arguments (-X properties, a transactional id);
        the run's JSON is kept as self.last_produce."""
        topic = self.topic(case)
        target.create_topic(topic, self.args.produce_partitions, self.perf)
        try:
            r = self.measure(target, case, [
                "produce", "--topic", topic, "--records", str(records),
                "--record-size", str(record_size), "--acks", acks,
                "--linger-ms", str(self.args.linger_ms), "--batch-size", str(self.args.batch_size),
                "--compression", "none", *perf_args])
            self.last_produce = r
            extra = self.produced(target, case, topic, r)
        finally:
            self.delete_topic(target, topic)
        unit = "mib_per_s" if record_size >= 1024 else "records_per_s"
        self.record(f"{case}", target.label, r[unit])
        cpu_per_gib = r["server_cpu_s"] / (r["bytes"] / GIB)
        self.record(f"cpu:{case}", target.label, cpu_per_gib)
        self.record("cpu-all:cpu", target.label, r["server_cpu_s"], add=True)
        self.record("cpu-all:bytes", target.label, r["bytes"], add=True)
        return (f"{r['mib_per_s']:8.1f} MiB/s {r['records_per_s']:10.0f} rec/s   "
                f"server CPU {r['server_cpu_s']:.2f} s = {cpu_per_gib:.2f} s/GiB   "
                f"client CPU {r['client_cpu_s']:.2f} s{extra}")

    def consume_case(self, target, case):
        if target.label not in self.consume_topic:
            raise RuntimeError("no consume topic (filling it failed)")
        r = self.measure(target, case, ["consume", "--topic", self.consume_topic[target.label],
                                        "--passes", str(self.args.consume_passes),
                                        "--fetch-wait-ms", str(self.args.consume_fetch_wait_ms)])
        self.record(case, target.label, r["mib_per_s"])
        self.record(f"{case}:streaming", target.label, r["streaming_mib_per_s"])
        self.record(f"{case}:first-wait", target.label, r["first_record_wait_s"])
        busy = 100 * r["busiest_thread_cpu_s"] / r["streaming_s"] if r["streaming_s"] > 0 else 0
        self.record(f"{case}:client-busiest", target.label, busy)
        cpu_per_gib = r["server_cpu_s"] / (r["bytes"] / GIB)
        self.record(f"{case}:server-cpu", target.label, cpu_per_gib)
        return (f"{r['mib_per_s']:8.1f} MiB/s {r['records_per_s']:10.0f} rec/s   "
                f"server CPU {r['server_cpu_s']:.2f} s = {cpu_per_gib:.2f} s/GiB   "
                f"client CPU {r['client_cpu_s']:.2f} s   "
                f"first to last record {r['streaming_mib_per_s']:.1f} MiB/s, "
                f"{r['first_record_wait_s']:.2f} s waiting for the passes' first records, "
                f"client thread {r['busiest_thread']} on CPU {busy:.0f}% of the streaming time")

    def latency_case(self, target, case, rate=None, prefix="latency"):
        """End-to-end latency at a fixed rate (--latency-rate unless given); the p99 is
        recorded as `case`, the rest as PREFIX-p50, -p999 and -cpu."""
        rate = rate or self.args.latency_rate
        topic = self.topic(case)
        target.create_topic(topic, 1, self.perf)
        try:
            r = self.measure(target, case, [
                "latency", "--topic", topic, "--rate", str(rate),
                "--duration-s", str(self.args.latency_seconds), "--warmup-s", "1",
                "--record-size", "1024", "--acks", "all", "--linger-ms", "0",
                "--fetch-wait-ms", str(self.args.fetch_wait_ms)])
        finally:
            self.delete_topic(target, topic)
        self.record(case, target.label, r["p99_ms"])
        self.record(f"{prefix}-p50", target.label, r["p50_ms"])
        self.record(f"{prefix}-p999", target.label, r["p999_ms"])
        # What the server spends per record at this steady low rate (warm-up included).
        sent = rate * (self.args.latency_seconds + 1)
        cpu_ms = 1000 * r["server_cpu_s"] / sent
        self.record(f"{prefix}-cpu", target.label, cpu_ms)
        return (f"p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  p99.9 {r['p999_ms']:.3f} ms  "
                f"max {r['max_ms']:.3f} ms  (max send lag {r['max_send_lag_ms']:.3f} ms)  "
                f"server CPU {cpu_ms:.3f} ms/record")

    def raw_write(self):
        """The disk reference: write(2) of as many bytes as a 1 KiB produce run moves, in
        1 MiB writes, into a file beside the node's logs (same file system), then unlink it.

        Two passes over the same file: the first writes into page-cache pages the kernel
        must allocate (what a log append does: durable produce cannot cost less CPU per GiB
        than this, and the mock keeps no copy); the second overwrites the pages the first
        left cached, which is the copy alone. On a VM whose balloon takes freed memory back
        (virtio free page reporting), a new page costs a fault in the hypervisor on first
        touch, charged as system time to whoever touches it; the gap between the passes
        shows that cost on this machine."""
        self.settle()
        path = os.path.join(self.raw_write_dir(), "raw-write.bin")
        chunk = memoryview(random.Random(7).randbytes(1 << 20))
        total = self.args.records_1k * 1024
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        figures = []
        try:
            for metric in ("raw-write", "raw-overwrite"):
                os.lseek(fd, 0, os.SEEK_SET)
                r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
                written = 0
                while written < total:
                    written += os.write(fd, chunk[:min(len(chunk), total - written)])
                t1, r1 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
                cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                self.record(metric, "raw", written / (1 << 20) / (t1 - t0))
                self.record(f"cpu:{metric}", "raw", cpu / (written / GIB))
                figures.append(f"{written / (1 << 20) / (t1 - t0):8.1f} MiB/s "
                               f"CPU {cpu / (written / GIB):.2f} s/GiB")
        finally:
            os.close(fd)
            os.unlink(path)
            self.freed_at = time.monotonic()
        print(f"[round {self.round + 1}/{self.args.rounds}] raw write(2) reference, new pages "
              f"{figures[0]}; overwriting cached pages {figures[1]}", flush=True)

    def raw_write_dir(self):
        """Beside the first Runnel node's logs (its temp dir), else /var/tmp."""
        return next((getattr(t, "node").dir for t in self.targets if hasattr(t, "node")),
                    "/var/tmp")

    def prepare_consume(self, t):
        """One 64-partition topic per target, filled once with the same records."""
        per_partition = self.args.consume_records_per_partition
        topic = self.topic("consume-64")
        t.create_topic(topic, 64, self.perf)
        self.perf.run("consume-fill", t, [
            "produce", "--topic", topic, "--records", str(64 * per_partition),
            "--record-size", "1024", "--acks", "1", "--linger-ms", str(self.args.linger_ms),
            "--batch-size", str(self.args.batch_size), "--compression", "none"])
        self.consume_topic[t.label] = topic

    def warm_up(self, t):
        topic = self.topic("warmup")
        t.create_topic(topic, self.args.produce_partitions, self.perf)
        self.perf.run("warm-up", t, ["produce", "--topic", topic, "--records", "20000",
                                     "--record-size", "1024", "--acks", "1"])
        self.delete_topic(t, topic)

    def attempt(self, what, t, fn):
        """Runs fn(t); a failure is recorded and reported, and the rest still run."""
        try:
            return fn(t)
        except Exception as e:
            self.failures.append(f"{what} on {t.label}: {e}")
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"{what} on {t.label} FAILED: {first}", flush=True)
            t.check_alive()
            return None

    def per_round(self, metric, label):
        """{round: value} of a metric; cpu-all is the CPU over the bytes of all produce runs."""
        if metric == "cpu-all":
            cpu = self.results.get("cpu-all:cpu", {}).get(label, {})
            data = self.results.get("cpu-all:bytes", {}).get(label, {})
            return {r: cpu[r] / (data[r] / GIB) for r in cpu if data.get(r)}
        return self.results.get(metric, {}).get(label, {})

    def compare(self, metric, subject, ref):
        """Medians of each side, and the median and range of the per-round ratios: the two
        runs of a round are back to back, so their ratio shares the machine's load of that
        moment, which a ratio of medians would not."""
        s_rounds, r_rounds = self.per_round(metric, subject), self.per_round(metric, ref)
        s = statistics.median(s_rounds.values()) if s_rounds else None
        r = statistics.median(r_rounds.values()) if r_rounds else None
        ratios = [s_rounds[k] / r_rounds[k] for k in s_rounds if r_rounds.get(k)]
        ratio = statistics.median(ratios) if ratios else None
        spread = (min(ratios), max(ratios)) if ratios else None
        return s, r, ratio, spread


    def print_header(self, subject, ref):
        print()
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"Load average at the end: {load} on {os.cpu_count()} CPUs (was {self.start_load} "
              f"at the start); other work on the machine widens the ranges below.")
        print(f"Medians of {self.args.rounds} round(s). ratio = {subject}/{ref}: the median of "
              f"the per-round ratios (each round runs both back to back), with their range.")

    def print_rows(self, rows, subject, ref, apply_goals=True, width=34):
        """A header, then one line per (name, metric, unit, better, goal) row (a row whose
        metric is None is a section title); a goal is ">= X" or "<= X" on the ratio
        subject/ref. Returns the rows as dicts."""
        table = []
        header = (f"{'case':{width}s} {'unit':6s} {subject:>10s} {ref:>10s} {'ratio':>6s} "
                  f"{'range':>11s}  {'better':6s} {'target':7s} met")
        print(header)
        print("-" * len(header))
        for name, metric, unit, better, goal in rows:
            if metric is None:  # a section title
                print(name)
                continue
            goal = goal if apply_goals else ""
            s, r, ratio, spread = self.compare(metric, subject, ref)
            met = ""
            if ratio is not None and goal:
                bound = float(goal.split()[1])
                ok = ratio >= bound if goal.startswith(">=") else ratio <= bound
                met = "yes" if ok else "NO"
            fmt = (lambda v: "n/a" if v is None else
                   (f"{v:.0f}" if unit in ("rec/s", "%") else
                    f"{v:.3f}" if unit == "ms" else f"{v:.2f}"))
            ratio_text = "n/a" if ratio is None else f"{ratio:.2f}"
            spread_text = "" if spread is None else f"{spread[0]:.2f}-{spread[1]:.2f}"
            print(f"{name:{width}s} {unit:6s} {fmt(s):>10s} {fmt(r):>10s} {ratio_text:>6s} "
                  f"{spread_text:>11s}  {better:6s} {goal:7s} {met}")
            table.append({"case": name, "metric": metric, "unit": unit, subject: s, ref: r,
                          "ratio": ratio, "ratio_range": spread, "better": better,
                          "target": goal, "met": met})
        return table

    def print_commands(self, extra=()):
        print()
        print("Commands ($BOOTSTRAP is each target's address; topics are fresh per run):")
        for t in self.targets:
            print(f"  {t.label}: {t.describe()}")
        for case, cmd in list(self.perf.commands.items()) + list(extra):
            print(f"  {case}: {cmd}")

    def finish(self, table, extra_json=None):
        """Prints the failures and writes --json."""
        if self.failures:
            print()
            print(f"{len(self.failures)} run(s) FAILED:")
            for f in self.failures:
                print("  " + f.replace("\n", "\n    "))
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump({"table": table, "runs": self.results, "failures": self.failures,
                           "commands": self.perf.commands, "args": vars(self.args),
                           **(extra_json or {})}, f, indent=1)


# ---------------------------------------------------------------- Apache Kafka 4.4 beside Runnel
# (bench/kafka-vs-kafka, bench/partitions)

PEERS_KAFKA = os.path.normpath(os.path.join(HERE, "..", "scripts", "peers", "kafka"))

# Server settings given to both nodes when Runnel is compared with Kafka (kafka-vs-kafka's
# docstring says why each).
COMMON_SERVER = {
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.interval.ms": "9223372036854775807",
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "log.segment.bytes": "1073741824",
    "log.preallocate": "false",
    "log.segment.delete.delay.ms": "0",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}
# Kafka's own defaults where scripts/peers/kafka sets small-machine values for tests.
KAFKA_ONLY = {"num.network.threads": "3", "num.io.threads": "8"}
# bin/kafka-server-start.sh's heap and kafka-run-class.sh's performance options.
KAFKA_JVM = ("-Xmx1G -Xms1G -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 "
             "-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent")


def load_peers():
    """scripts/peers/kafka as a module (it has no .py name)."""
    loader = importlib.machinery.SourceFileLoader("peers_kafka", PEERS_KAFKA)
    spec = importlib.util.spec_from_loader("peers_kafka", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def file_system(path):
    """(device, type, mount point) of the file system holding path."""
    path = os.path.realpath(path)
    best = ("", "?")
    with open("/proc/mounts") as f:
        for line in f:
            _, mount, fstype = line.split()[:3]
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and \
                    len(mount) >= len(best[0]):
                best = (mount, fstype)
    return os.stat(path).st_dev, best[1], best[0]


class KafkaTarget(AdminTopics):
    """One Kafka 4.4 KRaft node (broker+controller in one JVM) in DIR, started and stopped
    through scripts/peers/kafka's functions; only the JVM's own pid is ever signalled."""

    def __init__(self, label, peers, classpath, parent_dir, jvm_opts, port, extra_config=None):
        self.label = label
        self.extra_config = extra_config or {}
        self.peers = peers
        self.cp = classpath
        self.dir = tempfile.mkdtemp(prefix="kafka-", dir=parent_dir)
        self.jvm_opts = jvm_opts.split()
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        self.proc = None
        self.config = None
        self.command = None

    def prepare(self):
        """Writes server.properties and formats the log dir (kafka-storage format)."""
        controller = self.peers.free_port()
        self.config, _ = self.peers.prepare_node(
            self.cp, self.dir, 1, self.port, controller, f"1@127.0.0.1:{controller}",
            {**COMMON_SERVER, **KAFKA_ONLY, **self.extra_config}, self.peers.cluster_id())

    def spawn(self):
        log_file = os.path.join(self.dir, "server.log")
        self.command = self.peers.java_cmd(
            self.cp, self.jvm_opts, self.peers.SERVER_LOG4J, self.peers.TOOLS["kafka-server-start"],
            [self.config], [f"-Drunnel.peers.log.file={log_file}", f"-Dkafka.logs.dir={self.dir}"])
        self.proc = self.peers.spawn(self.dir, self.command, "kafka.out")

    def ready(self):
        pass  # serving once it answered a produce

    def terminate(self, timeout):
        """SIGTERM to the JVM this target started (a clean, controlled shutdown) and a
        bounded wait for its exit; returns the exit code. Past the timeout it is killed and
        TimeoutError raised. The data stay: spawn() starts the node again on them."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise TimeoutError(f"{self.label}: the JVM did not exit within {timeout}s of "
                               f"SIGTERM (killed)")

    def kill(self):
        """SIGKILL to the JVM this target started (an unclean stop); the data stay."""
        self.proc.kill()
        return self.proc.wait(timeout=30)

    def check_started(self):
        self.check_alive()

    def log_dirs(self):
        return [os.path.join(self.dir, "logs")]

    def server_pids(self):
        return [self.proc.pid]

    def check_alive(self):
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.label}: the JVM exited:\n"
                               f"{self.peers.tail(os.path.join(self.dir, 'server.log'))}")

    def describe(self):
        with open(self.config) as f:
            config = " ".join(l.strip() for l in f if l.strip() and not l.startswith("#"))
        cmd = shlex.join(self.command).replace(self.cp, "$KAFKA_CLASSPATH")
        return f"{cmd}   ({config}; $KAFKA_CLASSPATH is `{PEERS_KAFKA} classpath`)"

    def stop(self):
        if self.proc is not None:
            self.peers.stop_pid_file(self.dir, 60)
            if self.proc.poll() is None:
                self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class RunnelNode(RunnelTarget):
    """A Runnel node with its logs and metadata under DIR (the supervisor's config and run
    dir stay in the harness's temp dir); CPU and RSS over all its processes."""

    def __init__(self, label, bin_dir, parent_dir, extra_config=None):
        self.data = tempfile.mkdtemp(prefix="runnel-", dir=parent_dir)
        super().__init__(label, bin_dir, all_processes=True, extra_config={
            **COMMON_SERVER, "log.dirs": os.path.join(self.data, "logs"),
            "metadata.log.dir": os.path.join(self.data, "metadata"), **(extra_config or {})})

    def spawn(self):
        self.start(wait=False)

    def check_started(self):
        """The supervisor still runs (its roles are checked once it serves)."""
        if self.node.proc.poll() is not None:
            raise RuntimeError(f"{self.label}: the supervisor exited with "
                               f"{self.node.proc.returncode}:\n{self.node.log()[-4000:]}")

    def stop(self):
        try:
            super().stop()
        finally:
            shutil.rmtree(self.data, ignore_errors=True)
