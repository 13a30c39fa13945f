"""The supervisor: role restarts after kill -9, `runnel status`, config errors, shutdown."""
import os
import signal
import subprocess
import time
import unittest

from harness import BIN_DIR, Node, wait_until


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists": read its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class SupervisionTest(unittest.TestCase):
    def setUp(self):
        self.node = None

    def tearDown(self):
        if self.node is not None:
            self.node.cleanup()

    def test_status_shows_every_role_serving(self):
        self.node = Node().start()
        roles = self.node.status()
        self.assertEqual(set(roles), {"controllerd", "storaged", "brokerd"})
        for name, role in roles.items():
            self.assertEqual(role["state"], "serving", name)
            self.assertTrue(pid_alive(role["pid"]), name)
            self.assertEqual(role["restarts"], 0, name)

    def test_kill_9_brokerd_is_restarted_within_5s(self):
        self.node = Node().start()
        old_pid = self.node.status()["brokerd"]["pid"]
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)
        wait_until(lambda: self.node.status()["brokerd"]["pid"] not in (0, old_pid), 5,
                   "a new brokerd pid")
        wait_until(lambda: subprocess.run(
            ["kcat", "-L", "-b", self.node.bootstrap, "-m", "2"], capture_output=True,
            timeout=10).returncode == 0, max(0.5, 5 - (time.monotonic() - killed_at)),
            "kcat -L answered after the restart")
        self.assertLess(time.monotonic() - killed_at, 5.0)
        brokerd = self.node.status()["brokerd"]
        self.assertEqual(brokerd["restarts"], 1)
        self.assertEqual(self.node.status()["controllerd"]["restarts"], 0)

    def test_kill_9_controllerd_keeps_topics(self):
        self.node = Node().start()
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.node.bootstrap})
        for f in admin.create_topics([NewTopic("kept", 5, 1)], request_timeout=20).values():
            f.result(timeout=30)
        old_pid = self.node.status()["controllerd"]["pid"]
        os.kill(old_pid, signal.SIGKILL)
        wait_until(lambda: self.node.status()["controllerd"]["state"] == "serving" and
                   self.node.status()["controllerd"]["pid"] != old_pid, 15,
                   "controllerd restarted")
        # The broker re-follows the metadata stream; creating another topic works again.
        def create_again():
            fs = admin.create_topics([NewTopic("after-restart", 2, 1)], request_timeout=10)
            fs["after-restart"].result(timeout=15)
            return True
        wait_until(create_again, 30, "CreateTopics after a controller restart", interval=0.5)
        topics = admin.list_topics(timeout=10).topics
        self.assertEqual(len(topics["kept"].partitions), 5)
        self.assertIn("after-restart", topics)

    def test_sigterm_stops_every_role(self):
        self.node = Node().start()
        pids = [r["pid"] for r in self.node.status().values()]
        self.assertEqual(self.node.stop(), 0)
        for pid in pids:
            self.assertFalse(pid_alive(pid), pid)
        # Every role and the supervisor remove their sockets (only the pid file may stay).
        run_dir = os.path.join(self.node.dir, "run")
        self.assertEqual([f for f in os.listdir(run_dir) if f.endswith(".sock")], [])

    def test_config_typo_stops_startup_naming_the_key(self):
        self.node = Node(extra_config={"num.partitions": "abc"})
        out = self.node.runnel("--config", self.node.config_path)
        self.assertEqual(out.returncode, 2)
        self.assertIn("config error: num.partitions=abc", out.stderr)

    def test_unknown_key_is_a_warning(self):
        self.node = Node(extra_config={"no.such.key": "1"}).start()
        self.assertIn("no.such.key", self.node.log())

    def test_rotating_log_files_when_configured(self):
        log_dir = "/tmp/rnl-logs-%d" % os.getpid()
        os.makedirs(log_dir, exist_ok=True)
        try:
            self.node = Node(extra_config={"runnel.log.dir": log_dir}).start()
            def logged(role):
                with open(os.path.join(log_dir, role + ".log")) as f:
                    return f" {role} " in f.read()
            for role in ("controllerd", "storaged", "brokerd"):
                wait_until(lambda: logged(role), 5, f"{role} writing its log file")
        finally:
            if self.node is not None:
                self.node.cleanup()
                self.node = None
            subprocess.run(["rm", "-rf", log_dir], check=False)

    def test_status_without_supervisor_fails_clearly(self):
        self.node = Node()
        out = self.node.runnel("status", "--config", self.node.config_path)
        self.assertEqual(out.returncode, 1)
        self.assertTrue(out.stderr.strip())


if __name__ == "__main__":
    unittest.main()
