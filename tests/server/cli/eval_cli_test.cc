// Runs `stepserve eval` on a tiny synthetic model written by `stepserve make-model`.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/tokenizer/jinja_value.h"
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

// About `bytes` of English-like text: words drawn by a fixed LCG, sentences and paragraphs.
std::string MakeText(size_t bytes) {
  static const char* kWords[] = {
      "the",   "model",  "reads", "a",       "long",  "text",  "and",    "every", "token", "counts",
      "when",  "river",  "flows", "past",    "old",   "stone", "walls",  "of",    "quiet", "towns",
      "where", "people", "write", "letters", "about", "rain",  "summer", "light", "in",    "June"};
  std::string text;
  uint64_t state = 12345;
  int in_sentence = 0;
  while (text.size() < bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::string word = kWords[(state >> 33) % (sizeof(kWords) / sizeof(kWords[0]))];
    if (in_sentence == 0) word[0] = static_cast<char>(std::toupper(word[0]));
    text += word;
    if (++in_sentence >= 6 + static_cast<int>((state >> 20) % 8)) {
      text += ((state >> 40) % 5 == 0) ? ".\n\n" : ". ";
      in_sentence = 0;
    } else {
      text += ' ';
    }
  }
  return text;
}

struct EvalJson {
  bool ok = false;
  jinja::Value value;
  double Get(const char* key) const {
    const jinja::Value* v = value.object().Find(key);
    return v != nullptr && v->is_number() ? v->as_double() : std::nan("");
  }
};

EvalJson ParseLine(const std::string& out) {
  EvalJson result;
  absl::StatusOr<jinja::Value> v = jinja::ParseJson(out);
  if (v.ok() && v->is_object()) {
    result.ok = true;
    result.value = *v;
  }
  return result;
}

class EvalCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    model_ = dir_->File("tiny.gguf");
    text_ = dir_->File("text.txt");
    WriteAll(text_, MakeText(6000));
    RunResult made =
        RunStepserve(*dir_, "make-model --preset tiny --seed 3 --out " + ShellQuote(model_));
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  RunResult Eval(const std::string& args) {
    return RunStepserve(*dir_, "eval --model " + ShellQuote(model_) + " --threads 2 " + args);
  }

  static TempDir* dir_;
  static std::string model_, text_;
};

TempDir* EvalCliTest::dir_ = nullptr;
std::string EvalCliTest::model_, EvalCliTest::text_;

TEST_F(EvalCliTest, PrintsFinitePerplexity) {
  RunResult r = Eval("--text " + ShellQuote(text_) + " --ctx 64 --chunks 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[1/2] ppl"));
  EXPECT_THAT(r.err, HasSubstr("[2/2] ppl"));
  EXPECT_THAT(r.err, HasSubstr("perplexity: "));
  EvalJson json = ParseLine(r.out);
  ASSERT_TRUE(json.ok) << r.out;
  EXPECT_EQ(json.Get("chunks"), 2);
  EXPECT_EQ(json.Get("scored_tokens"), 2 * (64 - 1 - 32));
  const double ppl = json.Get("perplexity");
  EXPECT_TRUE(std::isfinite(ppl));
  EXPECT_GT(ppl, 1.0);
  EXPECT_GT(json.Get("perplexity_stderr"), 0.0);
  // The stderr line carries the same number.
  char expected[64];
  std::snprintf(expected, sizeof(expected), "perplexity: %.4f +/- ", ppl);
  EXPECT_THAT(r.err, HasSubstr(expected));
}

TEST_F(EvalCliTest, BatchRowsDoNotChangeTheResult) {
  RunResult whole = Eval("--text " + ShellQuote(text_) + " --ctx 64 --chunks 1");
  RunResult split = Eval("--text " + ShellQuote(text_) + " --ctx 64 --chunks 1 --batch-rows 10");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_EQ(split.exit_code, 0) << split.err;
  const double a = ParseLine(whole.out).Get("perplexity");
  const double b = ParseLine(split.out).Get("perplexity");
  ASSERT_TRUE(std::isfinite(a) && std::isfinite(b));
  EXPECT_NEAR(a, b, 1e-3 * a);
}

TEST_F(EvalCliTest, KldAgainstItselfIsZero) {
  const std::string saved = dir_->File("logits.bin");
  RunResult save = Eval("--text " + ShellQuote(text_) + " --ctx 64 --chunks 2 --save-logits " +
                        ShellQuote(saved));
  ASSERT_EQ(save.exit_code, 0) << save.err;
  RunResult kld = Eval("--text " + ShellQuote(text_) + " --ctx 64 --chunks 2 --kld-against " +
                       ShellQuote(saved));
  ASSERT_EQ(kld.exit_code, 0) << kld.err;
  EvalJson json = ParseLine(kld.out);
  ASSERT_TRUE(json.ok) << kld.out;
  EXPECT_NEAR(json.Get("mean_kld"), 0.0, 1e-6);
  EXPECT_EQ(json.Get("top1_agreement"), 1.0);
  EXPECT_EQ(json.Get("perplexity"), ParseLine(save.out).Get("perplexity"));
  EXPECT_THAT(kld.err, HasSubstr("mean KLD: "));

  // A reference saved with another ctx is refused, naming the file.
  RunResult mismatch = Eval("--text " + ShellQuote(text_) + " --ctx 32 --chunks 2 --kld-against " +
                            ShellQuote(saved));
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_THAT(mismatch.err, HasSubstr("logits.bin was saved with"));
}

TEST_F(EvalCliTest, CompressedKvCacheHasSmallKld) {
  // The KV cache element type is the only difference: F16 and Q8_0 caches against the F32 one.
  const std::string saved = dir_->File("logits-f32kv.bin");
  const std::string common = "--text " + ShellQuote(text_) + " --ctx 64 --chunks 2 ";
  RunResult save = Eval(common + "--save-logits " + ShellQuote(saved));
  ASSERT_EQ(save.exit_code, 0) << save.err;
  double kld[2];
  int i = 0;
  for (const char* dtype : {"f16", "q8_0"}) {
    RunResult r = Eval(common + "--kv-dtype " + dtype + " --kld-against " + ShellQuote(saved));
    ASSERT_EQ(r.exit_code, 0) << dtype << ": " << r.err;
    EvalJson json = ParseLine(r.out);
    ASSERT_TRUE(json.ok) << r.out;
    kld[i++] = json.Get("mean_kld");
    EXPECT_GE(json.Get("top1_agreement"), 0.9) << dtype;
    std::printf("[ kld ] %s KV cache vs f32: mean KLD %.3g, top-1 agreement %.3f\n", dtype,
                json.Get("mean_kld"), json.Get("top1_agreement"));
  }
  EXPECT_LT(kld[0], 1e-4);    // F16 rounding
  EXPECT_LT(kld[1], 1e-2);    // 8-bit per 32 values
  EXPECT_GT(kld[1], kld[0]);  // and the coarser type moves the distribution more

  RunResult bad = Eval(common + "--kv-dtype q4");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--kv-dtype"));
  EXPECT_THAT(bad.err, HasSubstr("q8_0"));
}

TEST_F(EvalCliTest, ClearErrors) {
  const std::string short_text = dir_->File("short.txt");
  WriteAll(short_text, "Just a few words.");
  RunResult r = Eval("--text " + ShellQuote(short_text) + " --ctx 64");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("at least one chunk of --ctx 64"));

  r = Eval("--text " + ShellQuote(dir_->File("absent.txt")) + " --ctx 64");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot open"));
  EXPECT_THAT(r.err, HasSubstr("absent.txt"));

  r = Eval("--text " + ShellQuote(text_) + " --ctx 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--ctx must be at least 4"));

  r = RunStepserve(*dir_, "eval --model " + ShellQuote(dir_->File("nope.gguf")) + " --text " +
                              ShellQuote(text_));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("nope.gguf"));
}

}  // namespace
}  // namespace stepserve::cli
