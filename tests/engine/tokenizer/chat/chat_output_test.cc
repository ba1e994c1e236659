#include "engine/tokenizer/chat_output.h"

#include <random>

#include "gtest/gtest.h"

namespace stepserve {
namespace {

const char kText[] =
    "Let me check the weather.\n</think>\n\nSure, checking.<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
    "<parameter=opts>\n{\"deep\": [1, true]}\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=noop>\n</function>\n</tool_call>";

TEST(ChatOutput, OneShot) {
  auto r = ParseStepOutput(kText);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reasoning, "Let me check the weather.\n");
  EXPECT_EQ(r->content, "Sure, checking.");
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0].name, "get_weather");
  const auto& args = r->tool_calls[0].arguments.object();
  EXPECT_EQ(args.Find("city")->str(), "Paris");
  EXPECT_TRUE(args.Find("days")->is_int());
  EXPECT_EQ(args.Find("days")->as_int(), 3);
  EXPECT_TRUE(args.Find("opts")->is_object());
  EXPECT_EQ(r->tool_calls[1].name, "noop");
}

TEST(ChatOutput, NoThinkEndIsAllReasoning) {
  auto r = ParseStepOutput("still thinking </thi");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reasoning, "still thinking </thi");
  EXPECT_EQ(r->content, "");
  r = ParseStepOutput("plain answer", /*reasoning_open=*/false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->content, "plain answer");
}

TEST(ChatOutput, MalformedToolCallIsError) {
  EXPECT_FALSE(ParseStepOutput("</think><tool_call>\n<function=f>\n<parameter=a>\n1\n</function>"
                               "\n</tool_call>")
                   .ok());
}

TEST(ChatOutput, StreamingRandomChunksMatchOneShot) {
  auto whole = ParseStepOutput(kText);
  ASSERT_TRUE(whole.ok());
  std::mt19937 rng(42);
  std::string text = kText;
  for (int trial = 0; trial < 200; ++trial) {
    StepOutputStream s;
    ChatOutputDelta acc;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t n = 1 + rng() % 7;
      auto d = s.Feed(text.substr(pos, n));
      ASSERT_TRUE(d.ok());
      // A marker is never leaked as content while streaming.
      EXPECT_EQ(d->content.find('<'), std::string::npos) << d->content;
      acc.reasoning += d->reasoning;
      acc.content += d->content;
      for (auto& c : d->tool_calls) acc.tool_calls.push_back(c);
      pos += n;
    }
    auto f = s.Finish();
    ASSERT_TRUE(f.ok());
    acc.reasoning += f->reasoning;
    acc.content += f->content;
    EXPECT_EQ(acc.reasoning, whole->reasoning);
    EXPECT_EQ(acc.content, whole->content);
    ASSERT_EQ(acc.tool_calls.size(), whole->tool_calls.size());
    EXPECT_TRUE(acc.tool_calls[0].arguments.Equals(whole->tool_calls[0].arguments));
  }
}

}  // namespace
}  // namespace stepserve
