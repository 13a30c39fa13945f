"""Start and stop real Runnel nodes for integration tests.

A Node is one `runnel` supervisor with its role daemons, in a fresh temporary directory,
listening on a free 127.0.0.1 port. Every wait is bounded. Only processes this harness
started are signalled, by PID. At stop, the node's log is scanned for sanitizer reports,
which fail the test.
"""
import fcntl
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

BIN_DIR = os.environ.get("RUNNEL_BIN_DIR", "")
SANITIZER_PATTERNS = re.compile(
    r"(ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|UndefinedBehaviorSanitizer)")


# Ports a test names before a daemon binds them. Binding port 0 and closing races under
# `ctest -j` (the kernel hands the port to the next asker, or to an outgoing connection), so a
# port is drawn from 20000-32767, below Linux's ephemeral range, and claimed by an flock on
# /tmp/runnel-test-ports/<port>.lock held until this process exits (the C++ tests use the same
# files: tests/util/reserved_port.h). A node keeps its port across restarts of its roles.
RESERVED_PORT_DIR = "/tmp/runnel-test-ports"
_reserved_port_files = []  # open, locked: the reservations of this process
_port_rng = random.Random()


def _loopback_bindable(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port():
    """A 127.0.0.1 port reserved for this process (see above)."""
    os.makedirs(RESERVED_PORT_DIR, exist_ok=True)
    for _ in range(500):
        port = _port_rng.randint(20000, 32767)
        f = open(os.path.join(RESERVED_PORT_DIR, f"{port}.lock"), "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        if not _loopback_bindable(port):
            f.close()
            continue
        _reserved_port_files.append(f)
        return port
    raise RuntimeError("no free loopback port in 20000-32767 after 500 draws")


def wait_until(predicate, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as e:  # the thing waited for may raise until it is ready
            last_error = e
        time.sleep(interval)
    raise TimeoutError(f"{what} did not happen within {timeout}s (last error: {last_error})")


class Node:
    def __init__(self, extra_config=None, node_id=1, bin_dir=None):
        # bin_dir: another build's binaries (bench/kafka-vs-mock --reference-bin-dir).
        self.bin_dir = bin_dir or BIN_DIR
        if not self.bin_dir:
            raise RuntimeError("RUNNEL_BIN_DIR is not set")
        self.dir = tempfile.mkdtemp(prefix="rnl-", dir="/tmp")
        self.port = free_port()
        self.node_id = node_id
        self.config_path = os.path.join(self.dir, "node.properties")
        self.log_path = os.path.join(self.dir, "node.log")
        self.proc = None
        self.log_file = None
        config = {
            "node.id": str(node_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": os.path.join(self.dir, "logs"),
            "metadata.log.dir": os.path.join(self.dir, "metadata"),
            "runnel.run.dir": os.path.join(self.dir, "run"),
            "runnel.supervisor.restart.backoff.initial.ms": "100",
            # One node: __consumer_offsets can only have one replica (Kafka's default is 3).
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        }
        config.update(extra_config or {})
        self.write_config(config)

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def write_config(self, config):
        with open(self.config_path, "w") as f:
            for k, v in config.items():
                f.write(f"{k}={v}\n")

    def env(self):
        """The environment for this node's supervisor: it starts the role daemons from
        $RUNNEL_BIN_DIR, which must be this node's bin dir (another build's, for an A/B)."""
        return dict(os.environ, RUNNEL_BIN_DIR=self.bin_dir)

    def runnel(self, *args, timeout=30, check=False):
        return subprocess.run([os.path.join(self.bin_dir, "runnel"), *args], capture_output=True,
                              text=True, timeout=timeout, check=check, env=self.env())

    def start(self, wait=True):
        self.log_file = open(self.log_path, "a")
        self.proc = subprocess.Popen([os.path.join(self.bin_dir, "runnel"), "--config",
                                      self.config_path], stdout=self.log_file,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.env())
        if wait:
            self.wait_ready()
        return self

    @property
    def is_broker(self):
        with open(self.config_path) as f:
            for line in f:
                if line.startswith("process.roles="):
                    return "broker" in line.split("=", 1)[1]
        return True  # the default roles are broker,controller

    def wait_ready(self, timeout=60):
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"runnel exited with {self.proc.returncode}:\n{self.log()}")
            roles = self.status()
            if not roles or any(r["state"] != "serving" for r in roles.values()):
                return False
            return not self.is_broker or self.kafka_ready()
        wait_until(ready, timeout, "node ready")

    def kafka_ready(self):
        """True when a Metadata request is answered with this broker in it."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.settimeout(5)
            body = struct.pack(">i", -1)  # Metadata v1: all topics (null array)
            send_request(s, 3, 1, 7, body)
            corr, payload = read_response(s)
            return corr == 7 and len(payload) > 4 and struct.unpack(">i", payload[:4])[0] >= 1

    def stop(self, timeout=30):
        """SIGTERM the supervisor and wait; returns its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise
        code = self.proc.returncode
        self.proc = None
        self.log_file.close()
        return code

    def status(self):
        """`runnel status` parsed into {role: {pid, state, restarts}}."""
        out = self.runnel("status", "--config", self.config_path, check=True).stdout
        roles = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[0] in ("controllerd", "storaged", "brokerd"):
                roles[parts[0]] = {"pid": int(parts[1]) if parts[1].isdigit() else 0,
                                   "state": parts[2], "restarts": int(parts[-1])}
        return roles

    def role_pid(self, role):
        """The pid of a role daemon (e.g. "brokerd"), checked to be a child of this node's
        supervisor, so a test only ever signals processes it started."""
        pid = self.status()[role]["pid"]
        if not pid or self.proc is None:
            raise RuntimeError(f"{role} has no pid: {self.status()}")
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        if ppid != self.proc.pid:
            raise RuntimeError(f"{role} pid {pid} is not a child of supervisor {self.proc.pid}")
        return pid

    def kill_role(self, role, sig=signal.SIGKILL):
        """Signals one role daemon; returns its pid."""
        pid = self.role_pid(role)
        os.kill(pid, sig)
        return pid

    def kill_all(self, roles=("controllerd", "storaged", "brokerd")):
        """kill -9 of the supervisor and every role (a node's machine dying): the supervisor is
        stopped first so that it restarts nothing, and killed last (its roles would get
        SIGTERM on its death). start() brings the node back."""
        pids = [self.role_pid(r) for r in roles]
        supervisor = self.proc
        os.kill(supervisor.pid, signal.SIGSTOP)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(timeout=30)

        def gone(pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] == "Z"
            except FileNotFoundError:
                return True
        wait_until(lambda: all(gone(p) for p in pids), 30, "the roles gone")
        self.proc = None
        self.log_file.close()

    def wait_role_restarted(self, role, old_pid, timeout=60):
        """Waits until the supervisor has replaced `old_pid` with a serving daemon."""
        def restarted():
            r = self.status()[role]
            return r["pid"] not in (0, old_pid) and r["state"] == "serving"
        wait_until(restarted, timeout, f"{role} restarted by the supervisor")
        self.wait_ready(timeout)

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def sanitizer_reports(self):
        return [l for l in self.log().splitlines() if SANITIZER_PATTERNS.search(l)]

    def cleanup(self):
        try:
            if self.proc is not None:
                self.stop()
        finally:
            reports = self.sanitizer_reports()
            if reports:
                raise AssertionError("sanitizer reports in the node log:\n" + self.log())
            shutil.rmtree(self.dir, ignore_errors=True)


def send_request(sock, api_key, version, correlation_id, body, client_id="it",
                 flexible=False):
    header = struct.pack(">hhi", api_key, version, correlation_id)
    cid = client_id.encode()
    header += struct.pack(">h", len(cid)) + cid
    if flexible:
        header += b"\x00"  # no tagged fields
    frame = header + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def read_response(sock):
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    (corr,) = struct.unpack(">i", frame[:4])
    return corr, frame[4:]


def metadata_v4_topic_error(port, topic, allow_auto_create):
    """Sends Metadata v4 for one topic and returns that topic's error code."""
    name = topic.encode()
    body = struct.pack(">ih", 1, len(name)) + name + struct.pack(">b", 1 if allow_auto_create else 0)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        send_request(s, 3, 4, 77, body)
        corr, p = read_response(s)
    assert corr == 77
    pos = 4  # throttle_time_ms
    (brokers,) = struct.unpack_from(">i", p, pos)
    pos += 4
    for _ in range(brokers):
        pos += 4  # node id
        (hlen,) = struct.unpack_from(">h", p, pos)
        pos += 2 + hlen + 4  # host, port
        (rlen,) = struct.unpack_from(">h", p, pos)
        pos += 2 + max(rlen, 0)  # rack
    (clen,) = struct.unpack_from(">h", p, pos)
    pos += 2 + max(clen, 0) + 4  # cluster id, controller id
    (topics,) = struct.unpack_from(">i", p, pos)
    assert topics == 1, topics
    (error_code,) = struct.unpack_from(">h", p, pos + 4)
    return error_code
