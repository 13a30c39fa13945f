"""kafka-topics and kafka-configs (Kafka 4.4's TopicCommand and ConfigCommand) against the
target: create, list, describe, alter partitions, delete; describe and alter topic configs."""
import re
import unittest

from peers import TargetTestCase, wait_until

# Every topic config Kafka 4.4 lists in `kafka-configs --describe --all` of a topic.
KAFKA_44_TOPIC_CONFIGS = sorted("""
cleanup.policy compression.gzip.level compression.lz4.level compression.type
compression.zstd.level delete.retention.ms errors.deadletterqueue.group.enable
file.delete.delay.ms flush.messages flush.ms follower.replication.throttled.replicas
index.interval.bytes leader.replication.throttled.replicas local.retention.bytes
local.retention.ms max.compaction.lag.ms max.decompressed.message.bytes max.message.bytes
message.timestamp.after.max.ms message.timestamp.before.max.ms message.timestamp.type
min.cleanable.dirty.ratio min.compaction.lag.ms min.insync.replicas preallocate
remote.copy.lag.bytes remote.copy.lag.ms remote.log.copy.disable remote.log.delete.on.disable
remote.storage.enable retention.bytes retention.ms segment.bytes segment.index.bytes
segment.jitter.ms segment.ms unclean.leader.election.enable
""".split())


def describe_partitions(text, topic):
    """{partition: leader} from `kafka-topics --describe` output."""
    parts = {}
    for line in text.splitlines():
        m = re.search(rf"Topic: {re.escape(topic)}\s+Partition: (\d+)\s+Leader: (-?\d+)", line)
        if m:
            parts[int(m.group(1))] = int(m.group(2))
    return parts


class TopicsTest(TargetTestCase):
    def list_topics(self):
        return self.tool("kafka-topics", "--list").stdout.split()

    def test_create_list_describe_alter_delete(self):
        t = self.topic()
        out = self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "3",
                        "--replication-factor", "1")
        self.assertIn(f"Created topic {t}.", out.stdout)
        self.assertIn(t, self.list_topics())

        desc = self.tool("kafka-topics", "--describe", "--topic", t).stdout
        self.assertRegex(desc, rf"Topic: {t}\s+TopicId: \S+\s+PartitionCount: 3\s+"
                               r"ReplicationFactor: 1")
        self.assertEqual(describe_partitions(desc, t), {0: 1, 1: 1, 2: 1})

        out = self.tool("kafka-topics", "--alter", "--topic", t, "--partitions", "5")
        desc = self.tool("kafka-topics", "--describe", "--topic", t).stdout
        self.assertRegex(desc, r"PartitionCount: 5\s")
        self.assertEqual(sorted(describe_partitions(desc, t)), [0, 1, 2, 3, 4])

        # Fewer partitions than a topic has is refused, and the tool says so.
        bad = self.tool("kafka-topics", "--alter", "--topic", t, "--partitions", "2",
                        check=False)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("InvalidPartitionsException", bad.stdout + bad.stderr)

        self.tool("kafka-topics", "--delete", "--topic", t)
        wait_until(lambda: t not in self.list_topics(), 30, f"{t} gone from --list")

    def test_create_twice_and_describe_unknown(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        again = self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1",
                          check=False)
        self.assertEqual(again.returncode, 1)
        self.assertIn(f"Topic '{t}' already exists.", again.stdout + again.stderr)
        # --if-not-exists makes it a no-op.
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1",
                  "--if-not-exists")
        unknown = self.tool("kafka-topics", "--describe", "--topic", t + "-nope", check=False)
        self.assertEqual(unknown.returncode, 1)
        self.assertIn(f"Topic '{t}-nope' does not exist as expected",
                      unknown.stdout + unknown.stderr)

    def test_describe_shows_eligible_leader_replicas(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        desc = self.tool("kafka-topics", "--describe", "--topic", t).stdout
        self.assertRegex(desc, rf"(?m)Topic: {t}\s+Partition: 0\s+Leader: 1\s+Replicas: 1\s+Isr: 1"
                               r"\s+Elr: \s+LastKnownElr: \s*$")

    def test_create_with_config_shows_in_describe(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "2",
                  "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
        desc = self.tool("kafka-topics", "--describe", "--topic", t).stdout
        configs = re.search(r"Configs: (\S*)", desc).group(1).split(",")
        self.assertIn("retention.ms=3600000", configs)
        self.assertIn("cleanup.policy=compact", configs)


class ConfigsTest(TargetTestCase):
    def describe(self, topic, *extra):
        out = self.tool("kafka-configs", "--entity-type", "topics", "--entity-name", topic,
                        "--describe", *extra).stdout
        configs = {}
        for line in out.splitlines():
            m = re.match(r"\s+([a-z0-9.]+)=(\S*) sensitive=(true|false) synonyms=\{(.*)\}$", line)
            if m:
                configs[m.group(1)] = (m.group(2), m.group(4))
        return out, configs

    def test_alter_and_describe_topic_config(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        out, configs = self.describe(t)
        self.assertIn(f"Dynamic configs for topic {t} are:", out)
        self.assertEqual(configs, {})

        out = self.tool("kafka-configs", "--entity-type", "topics", "--entity-name", t,
                        "--alter", "--add-config", "retention.ms=7200000,max.message.bytes=65536")
        self.assertIn(f"Completed updating config for topic {t}.", out.stdout)
        _, configs = self.describe(t)
        self.assertEqual(configs["retention.ms"][0], "7200000")
        self.assertIn("DYNAMIC_TOPIC_CONFIG:retention.ms=7200000", configs["retention.ms"][1])
        self.assertEqual(configs["max.message.bytes"][0], "65536")
        self.assertEqual(sorted(configs), ["max.message.bytes", "retention.ms"])

        self.tool("kafka-configs", "--entity-type", "topics", "--entity-name", t,
                  "--alter", "--delete-config", "retention.ms")
        _, configs = self.describe(t)
        self.assertEqual(sorted(configs), ["max.message.bytes"])

    def test_describe_all_lists_defaults(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        out, configs = self.describe(t, "--all")
        self.assertIn(f"All configs for topic {t} are:", out)
        for key in ("cleanup.policy", "retention.ms", "segment.bytes", "max.message.bytes",
                    "min.insync.replicas", "compression.type"):
            self.assertIn(key, configs)
        self.assertEqual(configs["cleanup.policy"][0], "delete")
        self.assertEqual(configs["retention.ms"][0], "604800000")

    def test_describe_all_is_kafka_44s_config_set(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        _, configs = self.describe(t, "--all")
        self.assertEqual(set(configs), set(KAFKA_44_TOPIC_CONFIGS))
        self.assertEqual(configs["message.timestamp.after.max.ms"][0], "3600000")  # KIP-1030
        # The cluster-wide default that formatting a new cluster writes.
        self.assertEqual(configs["min.insync.replicas"],
                         ("1", "DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1, "
                               "DEFAULT_CONFIG:min.insync.replicas=1"))

    def test_kafka_4_validation(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        for config, message in [
                ("message.downconversion.enable=true",
                 "Unknown topic config name: message.downconversion.enable"),
                ("compression.lz4.level=18", "Invalid value 18 for configuration "
                 "compression.lz4.level: Value must be no more than 17"),
                ("compression.gzip.level=0", "Invalid value 0 for configuration "
                 "compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
                ("remote.storage.enable=true", "Tiered Storage functionality is disabled in the "
                 "broker. Topic cannot be configured with remote log storage.")]:
            bad = self.tool("kafka-configs", "--entity-type", "topics", "--entity-name", t,
                            "--alter", "--add-config", config, check=False)
            self.assertNotEqual(bad.returncode, 0, config)
            self.assertIn(message, bad.stdout + bad.stderr)
        self.tool("kafka-configs", "--entity-type", "topics", "--entity-name", t, "--alter",
                  "--add-config", "compression.zstd.level=-5,remote.log.copy.disable=true")
        _, configs = self.describe(t)
        self.assertEqual(configs["compression.zstd.level"][0], "-5")
        self.assertEqual(configs["remote.log.copy.disable"][0], "true")

    def test_bad_value_is_refused(self):
        t = self.topic()
        self.tool("kafka-topics", "--create", "--topic", t, "--partitions", "1")
        bad = self.tool("kafka-configs", "--entity-type", "topics", "--entity-name", t,
                        "--alter", "--add-config", "cleanup.policy=sometimes", check=False)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("InvalidConfigurationException", bad.stdout + bad.stderr)


if __name__ == "__main__":
    unittest.main()
