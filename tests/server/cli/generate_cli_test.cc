// Runs `stepserve generate` on a tiny synthetic model written by `stepserve make-model`.
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/cli/cli_test_util.h"

namespace stepserve::cli {
namespace {

using ::stepserve::cli::testing::RunResult;
using ::stepserve::cli::testing::RunStepserve;
using ::stepserve::cli::testing::ShellQuote;
using ::stepserve::cli::testing::TempDir;
using ::stepserve::cli::testing::WriteAll;
using ::testing::HasSubstr;

struct Summary {
  long prompt_tokens = -1;
  long generated_tokens = -1;
  std::string stop;
};

Summary ParseSummary(const std::string& err) {
  Summary s;
  std::smatch m;
  static const std::regex summary(
      "summary: prompt ([0-9]+) tokens, [0-9.]+ tokens/s; generated ([0-9]+) tokens, [0-9.]+ "
      "tokens/s");
  if (std::regex_search(err, m, summary)) {
    s.prompt_tokens = std::stol(m[1]);
    s.generated_tokens = std::stol(m[2]);
  }
  static const std::regex stop("stop: ([a-z ]+)\n");
  if (std::regex_search(err, m, stop)) s.stop = m[1];
  return s;
}

class GenerateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    model_ = dir_->File("tiny.gguf");
    RunResult made =
        RunStepserve(*dir_, "make-model --preset tiny --seed 7 --out " + ShellQuote(model_));
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  RunResult Generate(const std::string& args) {
    return RunStepserve(*dir_, "generate --model " + ShellQuote(model_) + " --threads 2 " + args);
  }

  static TempDir* dir_;
  static std::string model_;
};

TempDir* GenerateCliTest::dir_ = nullptr;
std::string GenerateCliTest::model_;

TEST_F(GenerateCliTest, StreamsTextAndSummary) {
  RunResult r = Generate("--prompt 'The quick brown fox' -n 12 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Summary s = ParseSummary(r.err);
  EXPECT_GT(s.prompt_tokens, 1) << r.err;  // BOS + several text tokens
  EXPECT_GE(s.generated_tokens, 1) << r.err;
  EXPECT_LE(s.generated_tokens, 12) << r.err;
  if (s.generated_tokens < 12) {
    EXPECT_EQ(s.stop, "end of generation") << r.err;
  } else {
    EXPECT_EQ(s.stop, "token limit") << r.err;
  }
  // The text plus the final newline.
  EXPECT_GT(r.out.size(), 1u) << r.err;
}

TEST_F(GenerateCliTest, GreedyIsDeterministic) {
  RunResult a = Generate("--prompt 'Once upon a time' -n 16 --temperature 0");
  RunResult b = Generate("--prompt 'Once upon a time' -n 16 --temperature 0 --prefill-chunk 2");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  // Chunked prefill must not change the result.
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(ParseSummary(a.err).generated_tokens, ParseSummary(b.err).generated_tokens);
}

TEST_F(GenerateCliTest, SeededSamplingIsReproducible) {
  const std::string args =
      "--prompt 'In the beginning' -n 24 --temperature 1.0 --top-k 0 --top-p 1 --min-p 0 "
      "--seed 1234";
  RunResult a = Generate(args);
  RunResult b = Generate(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_THAT(a.err, HasSubstr("seed 1234"));
}

// Speculative decoding with the model's own MTP heads verifies every draft against the trunk, so
// greedy output is exactly plain greedy output.
TEST_F(GenerateCliTest, SelfDraftMatchesPlainGreedy) {
  RunResult plain = Generate("--prompt 'Once upon a time' -n 16 --temperature 0");
  RunResult spec = Generate("--prompt 'Once upon a time' -n 16 --temperature 0 --draft " +
                            ShellQuote(model_) + " --draft-max 3");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_EQ(ParseSummary(spec.err).generated_tokens, ParseSummary(plain.err).generated_tokens);
  EXPECT_THAT(spec.err, HasSubstr("speculative: {"));
  EXPECT_THAT(spec.err, HasSubstr("speculative: acceptance "));
}

TEST_F(GenerateCliTest, StopsWhenTheContextIsFull) {
  RunResult r = Generate("--prompt 'a b c' --no-bos --ctx-size 8 -n 100 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Summary s = ParseSummary(r.err);
  ASSERT_GT(s.prompt_tokens, 0) << r.err;
  if (s.stop != "end of generation") {
    EXPECT_EQ(s.stop, "context full") << r.err;
    EXPECT_EQ(s.prompt_tokens + s.generated_tokens, 8) << r.err;
  }
}

TEST_F(GenerateCliTest, TooLongPromptFails) {
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "many words of prompt ";
  RunResult r = Generate("--ctx-size 32 -n 4 --prompt " + ShellQuote(prompt));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("does not fit the context of 32 tokens"));
  EXPECT_EQ(r.out, "");
}

TEST_F(GenerateCliTest, ChatRendersAndRuns) {
  const std::string chat = dir_->File("chat.json");
  WriteAll(chat, R"({"messages": [
      {"role": "system", "content": "  You are terse.  "},
      {"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})");
  RunResult r = Generate("--chat " + ShellQuote(chat) + " -n 16 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Summary s = ParseSummary(r.err);
  // The rendered template (role markers, tool schema) is much longer than the user text.
  EXPECT_GT(s.prompt_tokens, 30) << r.err;
  EXPECT_GE(s.generated_tokens, 1) << r.err;

  // Inline JSON works the same way; greedy, so the output is identical.
  RunResult inline_run =
      Generate("--chat " + ShellQuote(testing::ReadAll(chat)) + " -n 16 --temperature 0");
  ASSERT_EQ(inline_run.exit_code, 0) << inline_run.err;
  EXPECT_EQ(inline_run.out, r.out);
  EXPECT_EQ(ParseSummary(inline_run.err).prompt_tokens, s.prompt_tokens);
}

TEST_F(GenerateCliTest, BadChatJsonFails) {
  RunResult r = Generate("--chat '{\"messages\": [{\"content\": \"hi\"}]}' -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("messages[0].role"));
  r = Generate("--chat '{\"messages\": [' -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("not valid JSON"));
}

TEST_F(GenerateCliTest, UsageErrors) {
  RunResult r = Generate("-n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("exactly one of --prompt and --chat"));
  r = RunStepserve(*dir_,
                   "generate --model " + ShellQuote(dir_->File("missing.gguf")) + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("missing.gguf"));
  r = Generate("--prompt hi --top-p 1.5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("top_p"));
}

}  // namespace
}  // namespace stepserve::cli
