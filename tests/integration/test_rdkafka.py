"""librdkafka's C and C++ APIs against a node: rdkafka_admin_check does the checks."""
import os
import subprocess
import unittest

from harness import BIN_DIR, Node


class RdkafkaTest(unittest.TestCase):
    def test_admin_and_metadata(self):
        node = Node().start()
        try:
            out = subprocess.run([os.path.join(BIN_DIR, "rdkafka_admin_check"), node.bootstrap],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            # The topics survive a restart of the whole node.
            self.assertEqual(node.stop(), 0)
            node.start()
            listing = subprocess.run(["kcat", "-L", "-b", node.bootstrap], capture_output=True,
                                     text=True, timeout=30).stdout
            self.assertIn('topic "rd-orders" with 12 partitions', listing)
            self.assertIn('topic "rd-events" with 4 partitions', listing)
        finally:
            node.cleanup()


if __name__ == "__main__":
    unittest.main()
