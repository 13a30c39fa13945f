"""The README's configuration table is the one `runnel --config-docs` prints."""
import os
import subprocess
import unittest

from harness import BIN_DIR

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


class DocsTest(unittest.TestCase):
    def test_readme_config_table_is_current(self):
        table = subprocess.run([os.path.join(BIN_DIR, "runnel"), "--config-docs"],
                               capture_output=True, text=True, check=True).stdout
        with open(README) as f:
            readme = f.read()
        missing = [line for line in table.splitlines() if line not in readme]
        self.assertEqual(missing, [], "README.md's config table is stale: paste "
                         "`runnel --config-docs` into it")


if __name__ == "__main__":
    unittest.main()
