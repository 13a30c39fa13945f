"""kafka-features (UpdateFeatures and ApiVersions' features) on a node created at
transaction.version 0 (Runnel: runnel.bootstrap.transaction.version=0; Kafka: kafka-storage
format --feature transaction.version=0): describe, upgrade to 2, downgrade to 1, the refusals
and --dry-run, and the Java client's transactional producer at each level (it runs KIP-890
part 2, an epoch bump per transaction, only at level 2)."""
import re
import unittest

from peers import TARGET, ClientTestCase


class FeaturesTest(ClientTestCase):
    client_kind = "java"
    runnel_config = {"runnel.bootstrap.transaction.version": "0"}
    kafka_features = {"transaction.version": 0}

    def describe(self):
        """transaction.version's line of `describe`: (supported min, max, finalized, epoch)."""
        out = self.tool("kafka-features", "describe").stdout
        lines = [line for line in out.splitlines() if line.startswith("Feature: ")]
        if TARGET == "runnel":
            # Only what Runnel implements is advertised (common/util/features.h): not Runnel's
            # own metadata.version, not group.version, kraft.version, ELR.
            self.assertEqual(len(lines), 1, out)
        found = [line for line in lines if line.split()[1] == "transaction.version"]
        self.assertEqual(len(found), 1, out)
        m = re.fullmatch(r"Feature: transaction\.version\s+SupportedMinVersion: (\d+)\s+"
                         r"SupportedMaxVersion: (\d+)\s+FinalizedVersionLevel: (\d+)\s+"
                         r"Epoch: (\d+)\s*", found[0])
        self.assertIsNotNone(m, found[0])
        return tuple(int(g) for g in m.groups())

    def features(self, op, *features, check=True, dry_run=False):
        args = [op, *[a for f in features for a in ("--feature", f)]]
        if dry_run:
            args.append("--dry-run")
        return self.tool("kafka-features", *args, check=check)

    def transactions(self, suffix):
        """Three transactions of the Java producer: its epoch and state after them."""
        t = self.topic(suffix)
        answer = self.client_of["client"].ok("create_topics", topics=[
            {"name": t, "partitions": 1, "configs": {}}])
        self.assertIsNone(answer["errors"][t])
        answer = self.client_of["client"].ok(
            "transactions", topic=t, partitions=1, transactional_id=t + "-tx",
            transactions=[{"count": 2, "commit": True}, {"count": 2, "commit": False},
                          {"count": 2, "commit": True}])
        self.assertEqual(answer["read_committed"], ["0-0", "0-1", "2-0", "2-1"])
        return answer["producer_epoch"], answer["state"]

    def test_upgrade_and_downgrade_transaction_version(self):
        supported_min, supported_max, level, epoch = self.describe()
        self.assertEqual((supported_min, supported_max, level), (0, 2, 0))
        # Level 0: the classic protocol, the epoch stays InitProducerId's.
        self.assertEqual(self.transactions("-v0"), (0, "CompleteCommit"))

        # --dry-run checks and writes nothing.
        out = self.features("upgrade", "transaction.version=2", dry_run=True)
        self.assertIn("transaction.version can be upgraded to 2.", out.stdout)
        self.assertEqual(self.describe()[2], 0)

        out = self.features("upgrade", "transaction.version=2")
        self.assertIn("transaction.version was upgraded to 2.", out.stdout)
        _, _, level, epoch2 = self.describe()
        self.assertEqual(level, 2)
        self.assertGreater(epoch2, epoch)
        # Level 2: every end bumps the epoch (EndTxn v5).
        self.assertEqual(self.transactions("-v2"), (3, "CompleteCommit"))

        # A downgrade needs the downgrade command (SAFE_DOWNGRADE).
        out = self.features("upgrade", "transaction.version=1", check=False)
        self.assertEqual(out.returncode, 1, out)
        self.assertIn("Could not upgrade transaction.version to 1. The update failed for all "
                      "features since the following feature had an error: Invalid update version "
                      "1 for feature transaction.version. Can't downgrade the version of this "
                      "feature without setting the upgrade type to either safe or unsafe "
                      "downgrade.", out.stdout)
        out = self.features("downgrade", "transaction.version=1")
        self.assertIn("transaction.version was downgraded to 1.", out.stdout)
        _, _, level, epoch1 = self.describe()
        self.assertEqual(level, 1)
        self.assertGreater(epoch1, epoch2)
        self.assertEqual(self.transactions("-v1"), (0, "CompleteCommit"))

        out = self.features("downgrade", "transaction.version=2", check=False)
        self.assertEqual(out.returncode, 1, out)
        self.assertIn("Invalid update version 2 for feature transaction.version. Can't downgrade "
                      "to a newer version.", out.stdout)
        out = self.features("upgrade", "transaction.version=3", check=False)
        self.assertEqual(out.returncode, 1, out)
        self.assertRegex(out.stdout, r"Invalid update version 3 for feature transaction\.version\. "
                                     r"Local controller \d+ only supports versions 0-2")
        self.assertEqual(self.describe()[2], 1)


if __name__ == "__main__":
    unittest.main()
