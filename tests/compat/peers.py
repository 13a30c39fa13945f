"""What a compat test runs against, and Kafka's own tools to judge it with.

RUNNEL_COMPAT_TARGET=runnel (the default) gives each test class a fresh Runnel node
(tests/integration/harness.Node, binaries from RUNNEL_BIN_DIR); RUNNEL_COMPAT_TARGET=kafka a
fresh Apache Kafka 4.4 KRaft node started by scripts/peers/kafka. The tools are Kafka 4.4's
own main classes, run through scripts/peers/kafka. A test that needs Kafka's jars skips when
they cannot be had (no Java, no Maven, no network on the first run), saying why.

A test that fails against Runnel because Runnel lacks something is marked with
runnel_gap(why): an expected failure against Runnel only, so it still has to pass against Kafka.
"""
import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.append(os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402

KAFKA = os.path.join(ROOT, "scripts", "peers", "kafka")
CLIENTS = os.path.join(ROOT, "scripts", "peers", "clients")
TARGET = os.environ.get("RUNNEL_COMPAT_TARGET", "runnel")
UNAVAILABLE = 3  # scripts/peers/kafka's exit status when the peers cannot be had
if TARGET not in ("runnel", "kafka"):
    raise RuntimeError(f"RUNNEL_COMPAT_TARGET={TARGET}: want runnel or kafka")

_prepared = None  # (ok, message), once per process
_clients = {}  # kind -> (argv or None, message), once per process


def require_peers():
    """Skips the calling test (class) unless Kafka's jars are in the cache or can be put
    there now."""
    global _prepared
    if _prepared is None:
        if not shutil.which("java"):
            _prepared = (False, "no java on PATH")
        else:
            try:
                out = subprocess.run([KAFKA, "prepare"], capture_output=True, text=True,
                                     timeout=900)
                _prepared = (out.returncode == 0,
                             f"scripts/peers/kafka prepare exited {out.returncode}: "
                             f"{out.stderr.strip()[-2000:]}")
            except subprocess.TimeoutExpired:
                _prepared = (False, "scripts/peers/kafka prepare took over 900 s")
    ok, message = _prepared
    if not ok:
        raise unittest.SkipTest(f"Apache Kafka 4.4's jars are not available: {message}")


def require_client(kind):
    """The command that runs the client program `kind` (java, python or go; see
    scripts/peers/clients), built or installed into the peers cache if it is not there yet;
    skips the calling test (class) when it cannot be had here."""
    if kind not in _clients:
        if kind == "java":
            require_peers()  # kafka-clients 4.4 comes with Kafka's jars
        try:
            out = subprocess.run([CLIENTS, "prepare", kind], capture_output=True, text=True,
                                 timeout=1800)
        except subprocess.TimeoutExpired:
            out = subprocess.CompletedProcess([], UNAVAILABLE, "", "took over 1800 s")
        if out.returncode == 0:
            _clients[kind] = (shlex.split(out.stdout.strip().split(" ", 1)[1]), "")
        elif out.returncode == UNAVAILABLE:
            _clients[kind] = (None, out.stderr.strip()[-2000:])
        else:  # a broken build is a failure, not a skip
            raise RuntimeError(f"scripts/peers/clients prepare {kind} exited {out.returncode}:\n"
                               f"{out.stderr}")
    argv, message = _clients[kind]
    if argv is None:
        raise unittest.SkipTest(f"the {kind} client cannot be had here: {message}")
    return argv


class LineClient:
    """A client program that takes one JSON request per line on stdin and answers each with
    one JSON line, {"ok": true, ...} or {"ok": false, "error": ..., "message": ...}
    (tests/compat/java/ClientCheck.java, pyclients.py, go/). Every wait is bounded: a request
    not answered in time kills the program, and the next request starts it anew."""

    def __init__(self, argv, name):
        self.argv = argv
        self.name = name
        self.proc = None

    def start(self):
        self.err = tempfile.TemporaryFile(mode="w+", errors="replace")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _read(proc, lines):
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def stderr(self, chars=4000):
        self.err.seek(0)
        return self.err.read()[-chars:]

    def call(self, op, timeout=90, **args):
        """Sends {"op": op, **args} and returns the answer, whether ok or not."""
        if self.proc is None:
            self.start()
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            err = self.stderr()
            self.close(timeout=0)
            raise AssertionError(f"{self.name} {op}: no answer within {timeout}s\n{err}")
        if line is None:
            code = self.proc.wait(timeout=30)
            err = self.stderr()
            self.close(timeout=0)
            raise AssertionError(f"{self.name} exited {code} on {op}\n{err}")
        return json.loads(line)

    def ok(self, op, timeout=90, **args):
        """Sends a request that must succeed and returns its answer."""
        answer = self.call(op, timeout=timeout, **args)
        if not answer.get("ok"):
            raise AssertionError(f"{self.name} {op} {json.dumps(args)}: {answer.get('error')}: "
                                 f"{answer.get('message')} {answer.get('cause', '')}")
        return answer

    def close(self, timeout=30):
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # the process this client started, by its Popen
            proc.wait(timeout=30)
        proc.stdout.close()
        self.err.close()


def runnel_gap(why):
    """Marks a test that fails against Runnel for a gap named by `why` (an API Runnel does
    not serve yet, say): an expected failure there, a plain test against Kafka."""
    def mark(test):
        test.runnel_gap = why
        if TARGET != "runnel" or os.environ.get("RUNNEL_COMPAT_SHOW_GAPS"):
            return test  # RUNNEL_COMPAT_SHOW_GAPS=1: see how each gap fails
        return unittest.expectedFailure(test)
    return mark


class Target:
    """One node of the target under test, on 127.0.0.1, in a fresh temporary directory."""

    def __init__(self, kind=TARGET, runnel_config=None, kafka_props=None, kafka_features=None):
        self.kind = kind
        self.runnel_config = {
            # Kafka's defaults for what a one-node test cluster needs, on both targets.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.runnel_config.update(runnel_config or {})
        self.kafka_props = dict(kafka_props or {})
        # Feature levels Kafka's node is formatted with ({"transaction.version": 0}), as
        # runnel.bootstrap.* gives them to Runnel's.
        self.kafka_features = dict(kafka_features or {})
        self.node = None
        self.dir = None
        self.port = None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        if self.kind == "runnel":
            if not harness.BIN_DIR:
                raise unittest.SkipTest("RUNNEL_BIN_DIR is not set (the Runnel binaries)")
            node = harness.Node(extra_config=self.runnel_config)
            try:
                node.start()
            except BaseException:
                node.cleanup()  # its directory, and a supervisor that did start
                raise
            self.node = node
            self.port = self.node.port
            self.dir = self.node.dir
            return self
        require_peers()
        self.dir = tempfile.mkdtemp(prefix="kpeer-", dir="/tmp")
        self.port = harness.free_port()
        props = os.path.join(self.dir, "extra.properties")
        with open(props, "w") as f:
            for k, v in self.kafka_props.items():
                f.write(f"{k}={v}\n")
        node_dir = os.path.join(self.dir, "node")
        features = [a for k, v in self.kafka_features.items() for a in ("--feature", f"{k}={v}")]
        out = subprocess.run([KAFKA, "start-node", node_dir, "--port", str(self.port),
                              "--props", props, *features],
                             capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise RuntimeError(f"Kafka node did not start:\n{out.stderr}")
        return self

    def stop(self):
        if self.kind == "runnel":
            if self.node is not None:
                self.node.cleanup()  # fails on sanitizer reports in the node's log
                self.node = None
            return
        if self.dir is not None:
            subprocess.run([KAFKA, "stop", os.path.join(self.dir, "node")], timeout=120)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log(self):
        if self.kind == "runnel":
            return self.node.log() if self.node else ""
        try:
            with open(os.path.join(self.dir, "node", "server.log"), errors="replace") as f:
                return f.read()
        except (FileNotFoundError, TypeError):
            return ""


def tool(name, *args, input=None, timeout=90, check=True):
    """Runs one of Kafka 4.4's tools (by its script name, kafka-topics, ...) and returns the
    CompletedProcess; with check, a non-zero exit fails with the tool's output."""
    require_peers()
    cmd = [KAFKA, "tool", name, *args]
    try:
        out = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{name} {' '.join(args)}: no exit within {timeout}s\n"
                             f"stdout: {e.stdout}\nstderr: {e.stderr}")
    if check and out.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} exited {out.returncode}\n"
                             f"stdout: {out.stdout}\nstderr: {out.stderr}")
    return out


class TargetTestCase(unittest.TestCase):
    """One target node per test class (a JVM start costs seconds on two cores)."""
    runnel_config = None
    kafka_props = None
    kafka_features = None

    @classmethod
    def setUpClass(cls):
        require_peers()
        cls.target = Target(runnel_config=cls.runnel_config, kafka_props=cls.kafka_props,
                            kafka_features=cls.kafka_features)
        cls.target.start()
        cls.bootstrap = cls.target.bootstrap

    @classmethod
    def tearDownClass(cls):
        cls.target.stop()

    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        # The time each test takes, shown by `unittest -v` before its verdict.
        sys.stderr.write(f"[{time.monotonic() - self.started:.1f} s] ")

    def tool(self, name, *args, **kwargs):
        return tool(name, "--bootstrap-server", self.bootstrap, *args, **kwargs)

    def topic(self, suffix=""):
        """A topic name of this test's own."""
        return f"{self._testMethodName.removeprefix('test_')}{suffix}".replace("_", "-")


def wait_until(predicate, timeout, what, interval=0.5):
    harness.wait_until(predicate, timeout, what, interval)


class ClientTestCase(TargetTestCase):
    """A target node and client programs (LineClient) of one kind, for a test class: `clients`
    names each program's extra arguments (the Python one serves two clients, say)."""
    client_kind = None  # java, python or go: what scripts/peers/clients runs
    clients = {"client": ()}

    @classmethod
    def setUpClass(cls):
        argv = require_client(cls.client_kind)  # skip before a node starts
        super().setUpClass()
        cls.client_of = {name: LineClient([*argv, *args, "--bootstrap", cls.bootstrap],
                                          f"{cls.client_kind} {name}")
                         for name, args in cls.clients.items()}

    @classmethod
    def tearDownClass(cls):
        for c in getattr(cls, "client_of", {}).values():
            c.close()
        super().tearDownClass()
