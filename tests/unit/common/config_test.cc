#include "common/config/config.h"

#include <gtest/gtest.h>

#include "common/config/listeners.h"

namespace runnel::config {
namespace {

TEST(ConfigTest, DefaultsWhenEmpty) {
  std::vector<std::string> warnings;
  auto c = Config::Parse("", &warnings);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->GetInt("node.id"), 1);
  EXPECT_EQ(c->GetInt("num.partitions"), 1);
  EXPECT_TRUE(c->GetBool("auto.create.topics.enable"));
  EXPECT_EQ(c->GetList("listeners"), std::vector<std::string>{"PLAINTEXT://127.0.0.1:9092"});
  EXPECT_EQ(c->SourceOf("node.id"), Source::kDefault);
  EXPECT_TRUE(warnings.empty());
}

TEST(ConfigTest, ParsesPropertiesSyntax) {
  std::vector<std::string> warnings;
  auto c = Config::Parse(
      "# comment\n! also a comment\n\n  node.id = 7 \nlog.dirs=/a, /b\nnum.partitions:3\n",
      &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->GetInt("node.id"), 7);
  EXPECT_EQ(c->GetList("log.dirs"), (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(c->GetInt("num.partitions"), 3);
  EXPECT_EQ(c->SourceOf("node.id"), Source::kFile);
}

TEST(ConfigTest, BadValueNamesKeyValueAndWhy) {
  std::vector<std::string> warnings;
  auto c = Config::Parse("num.partitions=abc\n", &warnings);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(std::string(c.status().message()),
            "config error: num.partitions=abc: not a whole number (expected int)");
}

TEST(ConfigTest, BoundsAndTypes) {
  struct Case {
    const char* text;
    const char* why;
  } cases[] = {
      {"num.partitions=0", "must be between 1 and 2147483647"},
      {"node.id=-1", "must be between 0 and 2147483647"},
      {"node.id=99999999999", "must be between 0 and 2147483647"},
      {"auto.create.topics.enable=yes", "must be true or false"},
      {"runnel.log.level=loud", "must be one of"},
      {"process.roles=broker,gateway", "unknown role 'gateway'"},
      {"listeners=PLAINTEXT://127.0.0.1", "has no port"},
      {"listeners=PLAINTEXT://127.0.0.1:99999", "bad port"},
      {"listeners=SSL://127.0.0.1:9093", "only PLAINTEXT"},
      {"listeners=", "needs at least one listener"},
      {"log.dirs= , ", "must name at least one directory"},
      {"group.coordinator.rebalance.protocols=consumer", "must include classic"},
      {"group.coordinator.rebalance.protocols=classic,share", "unknown group protocol 'share'"},
      {"group.consumer.assignors=sticky", "unknown assignor 'sticky'"},
      {"offsets.topic.num.partitions=0", "must be between 1 and 2147483647"},
  };
  for (const Case& c : cases) {
    auto parsed = Config::Parse(c.text, nullptr);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_NE(std::string(parsed.status().message()).find(c.why), std::string::npos)
        << c.text << " -> " << parsed.status().message();
  }
}

TEST(ConfigTest, UnknownKeyIsAWarning) {
  std::vector<std::string> warnings;
  auto c = Config::Parse("no.such.key=1\n", &warnings);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("no.such.key"), std::string::npos);
}

TEST(ConfigTest, LineWithoutSeparatorIsAnError) {
  auto c = Config::Parse("node.id\n", nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("line 1"), std::string::npos);
}

TEST(ConfigTest, EveryDefaultIsValid) {
  for (const KeyDef& def : AllKeys()) {
    EXPECT_EQ(CheckValue(def, def.default_value), "") << def.name;
    EXPECT_FALSE(def.doc.empty()) << def.name;
  }
}

TEST(ConfigTest, MarkdownTableListsEveryKey) {
  std::string table = MarkdownTable();
  for (const KeyDef& def : AllKeys()) {
    EXPECT_NE(table.find("`" + std::string(def.name) + "`"), std::string::npos) << def.name;
  }
}

TEST(ListenersTest, Parses) {
  auto l = ParseListeners("PLAINTEXT://0.0.0.0:9092");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<Listener>{{"PLAINTEXT", "0.0.0.0", 9092}}));
  auto v6 = ParseListeners("PLAINTEXT://[::1]:9093");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ((*v6)[0].host, "::1");
  auto any = ParseListeners("PLAINTEXT://:9094");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ((*any)[0].host, "");
  EXPECT_FALSE(ParseListeners("PLAINTEXT://a:1,PLAINTEXT://b:2").ok());
  EXPECT_FALSE(ParseListeners("nonsense").ok());
}

}  // namespace
}  // namespace runnel::config
