// LogitsTopKRef (kernels/sampling/logits_topk.h): hand-written rows for every special rule (ties,
// -0.0 / +0.0, -inf, NaN, +inf, k > vocab, null outputs, argument checks), and fresh random rows
// (std::mt19937, seed printed) checked against the engine's own row operations
// (engine/sampling/logits_ops.h: Argmax, LogSumExp, TopLogprobs), which the GPU path must agree
// with. Bounds: ids, argmax, row_max and top logits exact (bit for bit); log_sum_exp against the
// engine's float-exp / double-sum LogSumExp within 1e-6 * max(1, |lse|) (float exp and float
// x - max per term: ~1e-7 relative each).
#include "kernels/sampling/logits_topk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling/logits_ops.h"
#include "gtest/gtest.h"

namespace stepserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int32_t kIdPoison = -7;

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

// Outputs of one call, poisoned (ids kIdPoison, floats NaN) before it.
struct Outputs {
  std::vector<int32_t> top_ids, argmax;
  std::vector<float> top_logits, row_max, lse;

  Outputs(int64_t rows, int32_t k)
      : top_ids(rows * k, kIdPoison),
        argmax(rows, kIdPoison),
        top_logits(rows * k, kNaN),
        row_max(rows, kNaN),
        lse(rows, kNaN) {}

  LogitsTopKArgs Args(const std::vector<float>& logits, int64_t rows, int64_t vocab, int64_t stride,
                      int32_t k) {
    return LogitsTopKArgs{
        logits.data(),     rows,          vocab,          stride,    k, top_ids.data(),
        top_logits.data(), argmax.data(), row_max.data(), lse.data()};
  }
};

double ExactLse(const std::vector<double>& values) {
  double m = -INFINITY;
  for (double v : values) m = std::max(m, v);
  double s = 0.0;
  for (double v : values) s += std::exp(v - m);
  return m + std::log(s);
}

TEST(LogitsTopKRefTest, HandWrittenRowWithTiesSignedZerosInfAndNaN) {
  //                         0     1     2    3      4      5     6     7
  const std::vector<float> row = {1.0f, 3.0f, kNaN, 3.0f, -kInf, -0.0f, 0.0f, 2.0f};
  Outputs out(1, 8);
  ASSERT_EQ(LogitsTopKRef(out.Args(row, 1, 8, 8, 8)), KernelStatus::kOk);
  EXPECT_EQ(out.top_ids, (std::vector<int32_t>{1, 3, 7, 0, 5, 6, 4, 2}));
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(Bits(out.top_logits[j]), Bits(row[out.top_ids[j]])) << j;  // -0.0 stays -0.0
  }
  EXPECT_EQ(out.argmax[0], 1);
  EXPECT_EQ(out.row_max[0], 3.0f);
  EXPECT_FLOAT_EQ(out.lse[0], static_cast<float>(ExactLse({1, 3, 3, 0, 0, 2})));
}

TEST(LogitsTopKRefTest, NegativeZeroMaxKeepsItsSign) {
  const std::vector<float> row = {-kInf, -0.0f, 0.0f, -1.0f};
  Outputs out(1, 2);
  ASSERT_EQ(LogitsTopKRef(out.Args(row, 1, 4, 4, 2)), KernelStatus::kOk);
  EXPECT_EQ(out.argmax[0], 1);
  EXPECT_EQ(Bits(out.row_max[0]), Bits(-0.0f));
  EXPECT_EQ(out.top_ids, (std::vector<int32_t>{1, 2}));
}

TEST(LogitsTopKRefTest, KLargerThanVocabLeavesTheTailUntouched) {
  const std::vector<float> row = {0.5f, -2.0f, 0.5f, /*second row*/ 4.0f, 5.0f, 6.0f};
  Outputs out(2, 5);
  ASSERT_EQ(LogitsTopKRef(out.Args(row, 2, 3, 3, 5)), KernelStatus::kOk);
  EXPECT_EQ(out.top_ids, (std::vector<int32_t>{0, 2, 1, kIdPoison, kIdPoison,  //
                                               2, 1, 0, kIdPoison, kIdPoison}));
  EXPECT_TRUE(std::isnan(out.top_logits[3]) && std::isnan(out.top_logits[4]));
  EXPECT_TRUE(std::isnan(out.top_logits[8]) && std::isnan(out.top_logits[9]));
  EXPECT_EQ(out.top_logits[5], 6.0f);
  EXPECT_EQ(out.argmax, (std::vector<int32_t>{0, 2}));
}

TEST(LogitsTopKRefTest, RowStrideSkipsPadding) {
  const std::vector<float> rows = {1.0f, 2.0f, 100.0f, 3.0f, 0.0f, 100.0f};
  Outputs out(2, 1);
  ASSERT_EQ(LogitsTopKRef(out.Args(rows, 2, 2, 3, 1)), KernelStatus::kOk);
  EXPECT_EQ(out.argmax, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(out.top_ids, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(out.row_max, (std::vector<float>{2.0f, 3.0f}));
}

TEST(LogitsTopKRefTest, RowsWithoutFiniteValues) {
  // all -inf; all NaN; NaN and -inf mixed.
  const std::vector<float> rows = {-kInf, -kInf, -kInf, kNaN, kNaN, kNaN, kNaN, -kInf, kNaN};
  Outputs out(3, 3);
  ASSERT_EQ(LogitsTopKRef(out.Args(rows, 3, 3, 3, 3)), KernelStatus::kOk);
  EXPECT_EQ(out.argmax, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(out.row_max, (std::vector<float>{-kInf, -kInf, -kInf}));
  EXPECT_EQ(out.lse, (std::vector<float>{-kInf, -kInf, -kInf}));
  EXPECT_EQ(out.top_ids, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 1, 0, 2}));
}

TEST(LogitsTopKRefTest, PositiveInfinity) {
  const std::vector<float> row = {1.0f, kInf, 2.0f, kInf, kNaN};
  Outputs out(1, 4);
  ASSERT_EQ(LogitsTopKRef(out.Args(row, 1, 5, 5, 4)), KernelStatus::kOk);
  EXPECT_EQ(out.argmax[0], 1);
  EXPECT_EQ(out.row_max[0], kInf);
  EXPECT_EQ(out.lse[0], kInf);
  EXPECT_EQ(out.top_ids, (std::vector<int32_t>{1, 3, 2, 0}));
}

TEST(LogitsTopKRefTest, NullOutputsAreSkipped) {
  const std::vector<float> row = {0.0f, 1.0f, 2.0f};
  std::vector<int32_t> argmax(1, kIdPoison);
  LogitsTopKArgs a{row.data(), 1, 3, 3, 2, nullptr, nullptr, argmax.data(), nullptr, nullptr};
  ASSERT_EQ(LogitsTopKRef(a), KernelStatus::kOk);
  EXPECT_EQ(argmax[0], 2);
  std::vector<float> top_logits(2, kNaN);
  a = LogitsTopKArgs{row.data(), 1, 3, 3, 2, nullptr, top_logits.data(), nullptr, nullptr, nullptr};
  ASSERT_EQ(LogitsTopKRef(a), KernelStatus::kOk);
  EXPECT_EQ(top_logits, (std::vector<float>{2.0f, 1.0f}));
}

TEST(LogitsTopKRefTest, Validation) {
  const std::vector<float> row(8, 0.0f);
  Outputs out(1, 300);
  auto args = [&] { return out.Args(row, 1, 8, 8, 4); };
  EXPECT_EQ(ValidateLogitsTopK(args()), KernelStatus::kOk);
  LogitsTopKArgs a = args();
  a.logits = nullptr;
  EXPECT_EQ(ValidateLogitsTopK(a), KernelStatus::kInvalidArgument);
  a = args();
  a.rows = -1;
  EXPECT_EQ(ValidateLogitsTopK(a), KernelStatus::kInvalidArgument);
  a = args();
  a.rows = 0;
  EXPECT_EQ(LogitsTopKRef(a), KernelStatus::kOk);
  a = args();
  a.vocab = 0;
  EXPECT_EQ(ValidateLogitsTopK(a), KernelStatus::kInvalidArgument);
  a = args();
  a.row_stride = 7;
  EXPECT_EQ(ValidateLogitsTopK(a), KernelStatus::kInvalidArgument);
  a = args();
  a.k = 0;
  EXPECT_EQ(ValidateLogitsTopK(a), KernelStatus::kInvalidArgument);
  a = args();
  a.k = kLogitsTopKMaxK + 1;
  EXPECT_EQ(LogitsTopKRef(a), KernelStatus::kTooLarge);
  a = args();
  a.k = kLogitsTopKMaxK;
  EXPECT_EQ(ValidateLogitsTopK(a), KernelStatus::kOk);
  a = args();
  a.vocab = a.row_stride = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(ValidateLogitsTopK(a), KernelStatus::kTooLarge);
  EXPECT_EQ(out.argmax[0], kIdPoison);  // nothing written by failed calls
}

// Random rows of four kinds: smooth normal logits, heavy ties (few distinct values), rows
// sprinkled with -inf / NaN / signed zeros, and (row 1 of 3, rows 7 and 40 of 64) rows with no
// finite value at all.
enum class Kind { kNormal, kTies, kSpecial };

std::vector<float> RandomLogits(std::mt19937& rng, int64_t rows, int64_t vocab, int64_t stride,
                                Kind kind) {
  std::vector<float> x(rows * stride, kInf);  // padding: would win everything if read
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> level(-3, 3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      float v = normal(rng);
      if (kind == Kind::kTies) v = 0.5f * level(rng);
      if (kind == Kind::kSpecial) {
        const float p = u(rng);
        if (p < 0.10f)
          v = -kInf;
        else if (p < 0.15f)
          v = kNaN;
        else if (p < 0.17f)
          v = p < 0.16f ? -0.0f : 0.0f;
      }
      x[r * stride + i] = v;
    }
    if (kind == Kind::kSpecial && (r == 1 || r == 7 || r == 40)) {
      for (int64_t i = 0; i < vocab; ++i) x[r * stride + i] = u(rng) < 0.5f ? -kInf : kNaN;
    }
  }
  return x;
}

TEST(LogitsTopKRefTest, RandomRowsAgreeWithEngineRowOps) {
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  RecordProperty("seed", static_cast<int>(seed));
  std::mt19937 rng(seed);
  for (int64_t vocab : {1, 7, 1000, 128896}) {
    for (int64_t rows : {1, 3, 64}) {
      for (Kind kind : {Kind::kNormal, Kind::kTies, Kind::kSpecial}) {
        if (vocab == 128896 && rows == 64 && kind != Kind::kSpecial) continue;  // time
        const int64_t stride = vocab + (rows % 2 == 1 ? 3 : 0);
        const std::vector<float> x = RandomLogits(rng, rows, vocab, stride, kind);
        for (int32_t k : {1, 40, 256, static_cast<int32_t>(std::min<int64_t>(vocab + 3, 256))}) {
          SCOPED_TRACE("seed " + std::to_string(seed) + " vocab " + std::to_string(vocab) +
                       " rows " + std::to_string(rows) + " kind " +
                       std::to_string(static_cast<int>(kind)) + " k " + std::to_string(k));
          Outputs out(rows, k);
          ASSERT_EQ(LogitsTopKRef(out.Args(x, rows, vocab, stride, k)), KernelStatus::kOk);
          const int32_t count = static_cast<int32_t>(std::min<int64_t>(k, vocab));
          std::vector<TokenLogprob> expect(count);
          for (int64_t r = 0; r < rows; ++r) {
            const std::span<const float> row(x.data() + r * stride, vocab);
            const int32_t argmax = Argmax(row);
            ASSERT_EQ(out.argmax[r], argmax) << "row " << r;
            const float max = row[argmax] > -kInf ? row[argmax] : -kInf;
            ASSERT_EQ(Bits(out.row_max[r]), Bits(max)) << "row " << r;
            const double lse = LogSumExp(row);
            if (std::isinf(lse)) {
              ASSERT_EQ(out.lse[r], static_cast<float>(lse)) << "row " << r;
            } else {
              ASSERT_LE(std::fabs(out.lse[r] - lse), 1e-6 * std::max(1.0, std::fabs(lse)))
                  << "row " << r;
            }
            // TopLogprobs skips NaN: its entries come first, then the NaNs by id.
            const int filled = TopLogprobs(row, 0.0, count, expect.data());
            int32_t next_nan = 0;
            for (int32_t j = 0; j < count; ++j) {
              int32_t id;
              if (j < filled) {
                id = expect[j].token;
              } else {
                while (!std::isnan(row[next_nan])) ++next_nan;
                id = next_nan++;
              }
              ASSERT_EQ(out.top_ids[r * k + j], id) << "row " << r << " slot " << j;
              ASSERT_EQ(Bits(out.top_logits[r * k + j]), Bits(row[id]))
                  << "row " << r << " slot " << j;
            }
            for (int32_t j = count; j < k; ++j) ASSERT_EQ(out.top_ids[r * k + j], kIdPoison);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace stepserve::kernels
