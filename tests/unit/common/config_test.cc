#include "common/config/config.h"

#include <gtest/gtest.h>

#include "common/config/listeners.h"
#include "common/config/quorum_voters.h"

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

TEST(QuorumVotersTest, Parses) {
  auto v = ParseQuorumVoters("1@10.0.0.1:9093, 2@ctl-2:9093,3@[::1]:19093");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size(), 3u);
  EXPECT_EQ((*v)[0], (QuorumVoter{1, "10.0.0.1", 9093}));
  EXPECT_EQ((*v)[1], (QuorumVoter{2, "ctl-2", 9093}));
  EXPECT_EQ((*v)[2], (QuorumVoter{3, "::1", 19093}));
  EXPECT_EQ((*v)[0].Address(), "10.0.0.1:9093");
  EXPECT_EQ((*v)[2].Address(), "[::1]:19093");
  auto none = ParseQuorumVoters("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(QuorumVotersTest, RejectsBadEntries) {
  struct Case {
    const char* value;
    const char* why;
  } cases[] = {
      {"localhost:9093", "no '@'"},
      {"x@localhost:9093", "id must be a whole number"},
      {"-1@localhost:9093", "id must be a whole number"},
      {"@localhost:9093", "id must be a whole number"},
      {"1@localhost", "no port"},
      {"1@:9093", "no host"},
      {"1@localhost:0", "port must be in 1..65535"},
      {"1@localhost:65536", "port must be in 1..65535"},
      {"1@localhost:90a", "port must be in 1..65535"},
      {"1@::1:9093", "IPv6 address must be in brackets"},
      {"1@a:1,2@b:2,1@c:3", "voter id 1 is given more than once"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseQuorumVoters(c.value);
    ASSERT_FALSE(parsed.ok()) << c.value;
    EXPECT_NE(std::string(parsed.status().message()).find(c.why), std::string::npos)
        << c.value << " -> " << parsed.status().message();
    // The key's declaration runs the same check, naming the key.
    auto config = Config::Parse(std::string("controller.quorum.voters=") + c.value, nullptr);
    ASSERT_FALSE(config.ok()) << c.value;
    EXPECT_NE(std::string(config.status().message()).find("controller.quorum.voters"),
              std::string::npos);
  }
}

TEST(QuorumVotersTest, AControllerMustBeAVoter) {
  auto ok = Config::Parse("node.id=2\ncontroller.quorum.voters=1@a:9093,2@b:9093\n", nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->GetString("controller.quorum.voters"), "1@a:9093,2@b:9093");

  auto bad = Config::Parse("node.id=5\ncontroller.quorum.voters=1@a:9093,2@b:9093\n", nullptr);
  ASSERT_FALSE(bad.ok());
  std::string message(bad.status().message());
  EXPECT_NE(message.find("controller.quorum.voters"), std::string::npos) << message;
  EXPECT_NE(message.find("node.id 5"), std::string::npos) << message;

  // FromMap runs the same check.
  EXPECT_FALSE(Config::FromMap({{"node.id", "5"}, {"controller.quorum.voters", "1@a:1"}}).ok());
  // A broker-only node need not be a voter (it follows the quorum).
  EXPECT_TRUE(Config::Parse("node.id=5\nprocess.roles=broker\n"
                            "controller.quorum.voters=1@a:9093,2@b:9093\n",
                            nullptr)
                  .ok());
}

TEST(HttpListenerTest, ParsesHostAndPortAndRefusesTheRest) {
  auto local = ParseHttpListener("http://127.0.0.1:9644");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->host, "127.0.0.1");
  EXPECT_EQ(local->port, 9644);
  auto v6 = ParseHttpListener("http://[::1]:80/");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 80);
  auto any = ParseHttpListener("http://:9644");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->host, "");
  for (const char* bad : {"127.0.0.1:9644", "https://127.0.0.1:9644", "http://127.0.0.1",
                          "http://127.0.0.1:0", "http://127.0.0.1:65536", "http://127.0.0.1:x",
                          "http://::1:9644", "http://h/metrics:9644"}) {
    EXPECT_FALSE(ParseHttpListener(bad).ok()) << bad;
  }
}

TEST(HttpListenerTest, ABadValueStopsStartupNamingTheKey) {
  std::vector<std::string> warnings;
  auto config = Config::Parse("runnel.http.listener=localhost\n", &warnings);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("runnel.http.listener=localhost"), std::string::npos)
      << config.status().message();
  auto off = Config::Parse("", &warnings);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->GetString("runnel.http.listener"), "");
}

TEST(QuorumVotersTest, ABrokerOnlyNodeNeedsTheVotersAndAnIdOfItsOwn) {
  auto none = Config::Parse("node.id=5\nprocess.roles=broker\n", nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("controller.quorum.voters is empty"),
            std::string::npos)
      << none.status();
  auto taken = Config::Parse(
      "node.id=2\nprocess.roles=broker\n"
      "controller.quorum.voters=1@a:9093,2@b:9093\n",
      nullptr);
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(std::string(taken.status().message()).find("node.id 2 is one of the voters"),
            std::string::npos)
      << taken.status();
}

TEST(QuorumVotersTest, TimeoutDefaultsAreKafkas) {
  auto c = Config::Parse("", nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->GetString("controller.quorum.voters"), "");
  EXPECT_EQ(c->GetInt("controller.quorum.election.timeout.ms"), 1000);
  EXPECT_EQ(c->GetInt("controller.quorum.fetch.timeout.ms"), 2000);
  EXPECT_EQ(c->GetInt("controller.quorum.request.timeout.ms"), 2000);
  EXPECT_FALSE(Config::Parse("controller.quorum.election.timeout.ms=0", nullptr).ok());
}

TEST(BrokerSessionTest, DefaultsAreKafkasAndTheSessionOutlastsTheInterval) {
  auto c = Config::Parse("", nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->GetInt("broker.session.timeout.ms"), 9000);
  EXPECT_EQ(c->GetInt("broker.heartbeat.interval.ms"), 2000);
  EXPECT_TRUE(
      Config::Parse("broker.session.timeout.ms=300\nbroker.heartbeat.interval.ms=100\n", nullptr)
          .ok());
  for (const char* text :
       {"broker.session.timeout.ms=2000\n", "broker.heartbeat.interval.ms=9001\n"}) {
    auto bad = Config::Parse(text, nullptr);
    ASSERT_FALSE(bad.ok()) << text;
    std::string message(bad.status().message());
    EXPECT_NE(message.find("broker.session.timeout.ms"), std::string::npos) << message;
    EXPECT_NE(message.find("broker.heartbeat.interval.ms"), std::string::npos) << message;
  }
  EXPECT_FALSE(Config::FromMap({{"broker.session.timeout.ms", "1000"},
                                {"broker.heartbeat.interval.ms", "1000"}})
                   .ok());
}

}  // namespace
}  // namespace runnel::config
