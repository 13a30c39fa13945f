#include "common/util/topic_name.h"

#include <gtest/gtest.h>

namespace runnel {
namespace {

TEST(TopicNamesTest, LegalNames) {
  for (const char* name : {"a", "orders", "my.topic_v-2", "__consumer_offsets", "A9"}) {
    EXPECT_EQ(TopicNameError(name), "") << name;
  }
  EXPECT_EQ(TopicNameError(std::string(249, 'x')), "");
}

TEST(TopicNamesTest, IllegalNames) {
  for (const char* name : {"", ".", "..", "a b", "a/b", "tópico", "x:y"}) {
    EXPECT_NE(TopicNameError(name), "") << name;
  }
  EXPECT_NE(TopicNameError(std::string(250, 'x')), "");
}

}  // namespace
}  // namespace runnel
