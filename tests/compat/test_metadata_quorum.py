"""kafka-metadata-quorum (Kafka 4.4's MetadataQuorumCommand) against the target: the
metadata quorum of a one-node cluster, which is its own single voter and leader."""
import unittest

from peers import TargetTestCase
from test_groups import table


class MetadataQuorumTest(TargetTestCase):
    def test_describe_status(self):
        out = self.tool("kafka-metadata-quorum", "describe", "--status").stdout
        fields = {}
        for line in out.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        self.assertRegex(fields["ClusterId"], r"^\S+$")
        self.assertEqual(fields["LeaderId"], "1")
        self.assertGreaterEqual(int(fields["LeaderEpoch"]), 1)
        self.assertGreater(int(fields["HighWatermark"]), 0)
        self.assertEqual(fields["MaxFollowerLag"], "0")
        self.assertRegex(fields["CurrentVoters"], r'^\[\{"id": 1\b')
        self.assertEqual(fields["CurrentObservers"], "[]")

    def test_describe_replication(self):
        out = self.tool("kafka-metadata-quorum", "describe", "--replication").stdout
        rows = table(out, "NodeId")
        self.assertEqual(len(rows), 1, out)
        self.assertEqual(rows[0]["NodeId"], "1")
        self.assertEqual(rows[0]["Status"], "Leader")
        self.assertEqual(rows[0]["Lag"], "0")


if __name__ == "__main__":
    unittest.main()
