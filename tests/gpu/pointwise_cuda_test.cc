// The CUDA backend's pointwise ops (RmsNorm, QkNormRope, HeadGate, SwiGlu, Add, RouterTopK)
// against the CPU backend on fresh random data. Every output starts poisoned (NaN), rows are
// optionally padded (row_stride > cols) with a sentinel in the padding that must survive, sizes
// are odd (4096 + 32 columns; 1, 7 and 513 rows), and the in-place forms the interface allows are
// run too. Bounds are ||cuda - cpu|| / ||cpu|| over the written elements:
//  - Add: 1e-6 (one F32 addition each, the same rounding on both sides: expect 0).
//  - HeadGate, SwiGlu: 1e-5 (device expf is within 2 ulp of the host's: ~1e-7 observed scale).
//  - RmsNorm, QkNormRope: 1e-4 (sums of squares reduced in another order, device sqrt/cos/sin;
//    the RoPE angle itself is formed bit-identically, so large positions do not widen the error).
//  - RouterTopK weights: 1e-5; ids equal, except where the two experts' scores (in double) differ
//    by less than 1e-6, where float rounding may order them either way.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "gtest/gtest.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::CudaBackendOrNull;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::UploadBytes;

constexpr double kAddBound = 1e-6;
constexpr double kElementwiseBound = 1e-5;
constexpr double kNormBound = 1e-4;
constexpr double kRouterWeightBound = 1e-5;
constexpr double kRouterTieScore = 1e-6;

// Padding between rows holds this value; no op may overwrite it.
constexpr float kPadSentinel = -12345.0f;

// A host F32 matrix of `rows` rows, each `stride` floats apart (>= cols).
struct HostMat {
  int64_t cols = 0;
  int64_t rows = 0;
  int64_t stride = 0;
  std::vector<float> data;

  TensorView view() { return TensorView::F32(data.data(), cols, rows, stride); }
  float at(int64_t r, int64_t c) const { return data[r * stride + c]; }
};

HostMat FilledMat(int64_t cols, int64_t rows, int64_t pad, float value) {
  HostMat m{cols, rows, cols + pad, {}};
  m.data.assign(static_cast<size_t>(m.stride * rows), kPadSentinel);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) m.data[r * m.stride + c] = value;
  }
  return m;
}

HostMat PoisonedMat(int64_t cols, int64_t rows, int64_t pad) {
  return FilledMat(cols, rows, pad, std::numeric_limits<float>::quiet_NaN());
}

// Normal values times `scale`, plus `offset`.
HostMat RandomMat(std::mt19937& rng, int64_t cols, int64_t rows, int64_t pad, float scale,
                  float offset = 0.0f) {
  HostMat m = FilledMat(cols, rows, pad, 0.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) m.data[r * m.stride + c] = offset + scale * normal(rng);
  }
  return m;
}

std::vector<float> RandomVector(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = uniform(rng);
  return v;
}

// A copy of a HostMat in backend memory (padding included) and its view.
struct DevMat {
  BackendBuffer buffer;
  TensorView view;
};

DevMat ToDevice(Backend& backend, const HostMat& m) {
  DevMat d;
  d.buffer = UploadBytes(backend, m.data.data(), m.data.size() * sizeof(float));
  d.view = TensorView::F32(d.buffer.f32(), m.cols, m.rows, m.stride);
  return d;
}

HostMat FromDevice(Backend& backend, const DevMat& d, const HostMat& like) {
  HostMat m = like;
  EXPECT_TRUE(backend.Download(d.buffer.data(), m.data.data(), m.data.size() * 4).ok());
  return m;
}

WeightView F32Weight(const void* data, int64_t n) {
  WeightView w;
  w.data = data;
  w.type = GgmlType::kF32;
  w.ne[0] = n;
  return w;
}

// ||got - want|| / ||want|| over the rows' elements (NaN anywhere in `got` gives infinity), and
// every padding float of `got` must still be the sentinel.
double RelError(const HostMat& got, const HostMat& want) {
  double diff = 0.0, norm = 0.0;
  bool nan = false;
  int64_t pad_changed = 0;
  for (int64_t r = 0; r < want.rows; ++r) {
    for (int64_t c = 0; c < want.stride; ++c) {
      const float g = got.at(r, c);
      if (c >= want.cols) {
        pad_changed += g != kPadSentinel;
        continue;
      }
      nan |= std::isnan(g);
      const double d = static_cast<double>(g) - want.at(r, c);
      diff += d * d;
      norm += static_cast<double>(want.at(r, c)) * want.at(r, c);
    }
  }
  EXPECT_EQ(pad_changed, 0) << "the op wrote into row padding";
  if (nan) return std::numeric_limits<double>::infinity();
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

class PointwiseCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda_ = CudaBackendOrNull();
    if (!cuda_) GTEST_SKIP() << kNoDeviceMessage;
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", {.num_threads = 4});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    const unsigned seed = std::random_device{}();
    rng_.seed(seed);
    RecordProperty("seed", static_cast<int>(seed));
    std::printf("seed %u\n", seed);
  }

  std::unique_ptr<Backend> cuda_;
  std::unique_ptr<Backend> cpu_;
  std::mt19937 rng_;
};

struct Shape {
  int64_t cols;
  int64_t rows;
  int64_t pad;
};

std::string Describe(const Shape& s) {
  return absl::StrFormat("[%d, %d] pad %d", s.cols, s.rows, s.pad);
}

// Odd sizes around n_embd (block per row), small ones (warp per row), one row and 513 rows,
// padded and packed.
const Shape kRowShapes[] = {{4096 + 32, 7, 0},  {4096 + 32, 1, 0}, {4096 + 32, 513, 0},
                            {4096 + 32, 7, 13}, {16384, 3, 4},     {7, 5, 0},
                            {1000, 9, 3},       {1025, 2, 0},      {8000, 4, 0}};

TEST_F(PointwiseCudaTest, RmsNormMatchesCpu) {
  for (const Shape& s : kRowShapes) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(Describe(s) + (in_place ? " in place" : ""));
      HostMat x = RandomMat(rng_, s.cols, s.rows, s.pad, 2.0f, 0.5f);
      std::vector<float> weight = RandomVector(rng_, s.cols, 0.5f, 1.5f);
      BackendBuffer dev_weight = UploadBytes(*cuda_, weight.data(), weight.size() * 4);
      const float eps = 1e-5f;

      HostMat want = in_place ? x : PoisonedMat(s.cols, s.rows, s.pad);
      HostMat cpu_x = x;
      ASSERT_TRUE(cpu_->RmsNorm(cpu_x.view(), F32Weight(weight.data(), s.cols), eps,
                                in_place ? cpu_x.view() : want.view())
                      .ok());
      if (in_place) want = cpu_x;

      DevMat dx = ToDevice(*cuda_, x);
      DevMat dout = ToDevice(*cuda_, PoisonedMat(s.cols, s.rows, s.pad));
      const DevMat& target = in_place ? dx : dout;
      ASSERT_TRUE(
          cuda_->RmsNorm(dx.view, F32Weight(dev_weight.data(), s.cols), eps, target.view).ok());
      EXPECT_LE(RelError(FromDevice(*cuda_, target, want), want), kNormBound);
    }
  }
}

// The fused residual add + norm (one kernel for n_embd-sized rows, else Add then RmsNorm): h ends
// as the CPU's h + delta (the same float sums), out as its norm. delta has its own padding, so
// both its 16-byte aligned and unaligned strides are taken.
TEST_F(PointwiseCudaTest, AddRmsNormMatchesCpu) {
  for (const Shape& s : kRowShapes) {
    for (const int64_t delta_pad : {int64_t{0}, s.pad + 3}) {
      SCOPED_TRACE(Describe(s) + absl::StrFormat(" delta pad %d", delta_pad));
      HostMat h = RandomMat(rng_, s.cols, s.rows, s.pad, 2.0f, 0.5f);
      HostMat delta = RandomMat(rng_, s.cols, s.rows, delta_pad, 1.0f);
      std::vector<float> weight = RandomVector(rng_, s.cols, 0.5f, 1.5f);
      BackendBuffer dev_weight = UploadBytes(*cuda_, weight.data(), weight.size() * 4);
      const float eps = 1e-5f;
      HostMat cpu_h = h, want = PoisonedMat(s.cols, s.rows, s.pad);
      ASSERT_TRUE(cpu_->AddRmsNorm(cpu_h.view(), delta.view(), F32Weight(weight.data(), s.cols),
                                   eps, want.view())
                      .ok());
      DevMat dh = ToDevice(*cuda_, h), ddelta = ToDevice(*cuda_, delta);
      DevMat dout = ToDevice(*cuda_, PoisonedMat(s.cols, s.rows, s.pad));
      ASSERT_TRUE(cuda_
                      ->AddRmsNorm(dh.view, ddelta.view, F32Weight(dev_weight.data(), s.cols), eps,
                                   dout.view)
                      .ok());
      EXPECT_LE(RelError(FromDevice(*cuda_, dh, cpu_h), cpu_h), kAddBound);
      EXPECT_LE(RelError(FromDevice(*cuda_, dout, want), want), kNormBound);
    }
  }
  // out may not alias h (the sum would be overwritten by the norm).
  HostMat h = RandomMat(rng_, 4096, 2, 0, 1.0f), delta = RandomMat(rng_, 4096, 2, 0, 1.0f);
  std::vector<float> weight(4096, 1.0f);
  BackendBuffer dev_weight = UploadBytes(*cuda_, weight.data(), weight.size() * 4);
  DevMat dh = ToDevice(*cuda_, h), ddelta = ToDevice(*cuda_, delta);
  EXPECT_EQ(
      cuda_->AddRmsNorm(dh.view, ddelta.view, F32Weight(dev_weight.data(), 4096), 1e-5f, dh.view)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(PointwiseCudaTest, AddMatchesCpuIncludingInPlace) {
  for (const Shape& s : kRowShapes) {
    for (const int alias : {0, 1, 2}) {  // y separate, y == a, y == b
      SCOPED_TRACE(Describe(s) + absl::StrFormat(" alias %d", alias));
      HostMat a = RandomMat(rng_, s.cols, s.rows, s.pad, 1.0f);
      HostMat b = RandomMat(rng_, s.cols, s.rows, s.pad, 3.0f);
      HostMat ca = a, cb = b, cy = PoisonedMat(s.cols, s.rows, s.pad);
      HostMat& cpu_target = alias == 1 ? ca : (alias == 2 ? cb : cy);
      ASSERT_TRUE(cpu_->Add(ca.view(), cb.view(), cpu_target.view()).ok());

      DevMat da = ToDevice(*cuda_, a), db = ToDevice(*cuda_, b);
      DevMat dy = ToDevice(*cuda_, PoisonedMat(s.cols, s.rows, s.pad));
      const DevMat& target = alias == 1 ? da : (alias == 2 ? db : dy);
      ASSERT_TRUE(cuda_->Add(da.view, db.view, target.view).ok());
      EXPECT_LE(RelError(FromDevice(*cuda_, target, cpu_target), cpu_target), kAddBound);
    }
  }
}

TEST_F(PointwiseCudaTest, SwiGluMatchesCpuClampedAndNotInPlace) {
  for (const Shape& s : kRowShapes) {
    for (const float limit : {0.0f, 7.0f}) {
      for (const int alias : {0, 1, 2}) {  // z separate, z == g, z == u
        SCOPED_TRACE(Describe(s) + absl::StrFormat(" limit %g alias %d", limit, alias));
        // Wide values so both clamps (u to +-limit, SiLU(g) from above) are exercised.
        HostMat g = RandomMat(rng_, s.cols, s.rows, s.pad, 6.0f);
        HostMat u = RandomMat(rng_, s.cols, s.rows, s.pad, 6.0f);
        HostMat cg = g, cu = u, cz = PoisonedMat(s.cols, s.rows, s.pad);
        HostMat& cpu_target = alias == 1 ? cg : (alias == 2 ? cu : cz);
        ASSERT_TRUE(cpu_->SwiGlu(cg.view(), cu.view(), limit, cpu_target.view()).ok());

        DevMat dg = ToDevice(*cuda_, g), du = ToDevice(*cuda_, u);
        DevMat dz = ToDevice(*cuda_, PoisonedMat(s.cols, s.rows, s.pad));
        const DevMat& target = alias == 1 ? dg : (alias == 2 ? du : dz);
        ASSERT_TRUE(cuda_->SwiGlu(dg.view, du.view, limit, target.view).ok());
        EXPECT_LE(RelError(FromDevice(*cuda_, target, cpu_target), cpu_target), kElementwiseBound);
      }
    }
  }
}

TEST_F(PointwiseCudaTest, HeadGateMatchesCpu) {
  struct Case {
    int64_t heads, head_dim, rows, o_pad, gate_pad;
  };
  for (const Case& c : {Case{7, 128, 7, 0, 0}, Case{64, 128, 1, 0, 0}, Case{7, 128, 513, 5, 3},
                        Case{3, 256, 9, 0, 1}, Case{5, 64, 2, 31, 0}}) {
    SCOPED_TRACE(absl::StrFormat("heads %d head_dim %d rows %d pads %d/%d", c.heads, c.head_dim,
                                 c.rows, c.o_pad, c.gate_pad));
    HostMat o = RandomMat(rng_, c.heads * c.head_dim, c.rows, c.o_pad, 1.0f);
    HostMat gate = RandomMat(rng_, c.heads, c.rows, c.gate_pad, 3.0f);
    HostMat want = o;
    ASSERT_TRUE(cpu_->HeadGate(want.view(), gate.view(), c.head_dim).ok());

    DevMat dov = ToDevice(*cuda_, o), dgate = ToDevice(*cuda_, gate);
    ASSERT_TRUE(cuda_->HeadGate(dov.view, dgate.view, c.head_dim).ok());
    EXPECT_LE(RelError(FromDevice(*cuda_, dov, want), want), kElementwiseBound);
    EXPECT_EQ(RelError(FromDevice(*cuda_, dgate, gate), gate), 0.0) << "gate logits changed";
  }
}

TEST_F(PointwiseCudaTest, QkNormRopeMatchesCpu) {
  struct Case {
    int64_t head_dim, n_rot, q_heads, k_heads, tokens, q_pad;
    bool freq_factors;
    int32_t max_position;
  };
  const Case cases[] = {
      {128, 64, 7, 3, 7, 0, false, 4096},      // partial rotation (SWA-style)
      {128, 128, 7, 3, 1, 0, true, 262144},    // full rotation with freq factors, large position
      {128, 64, 64, 8, 513, 0, true, 100000},  // Step-3.5-like head counts, many tokens
      {64, 64, 5, 1, 9, 17, false, 1000},      // padded q rows
      {256, 128, 3, 0, 7, 0, true, 50000},     // no k
      {256, 256, 2, 2, 4, 0, false, 70000},    // largest head
      {96, 32, 3, 3, 5, 0, true, 300},         // head_dim not a multiple of 64
      {192, 192, 4, 1, 7, 0, true, 200000},    // Step-5 head_dim
      {32, 16, 4, 2, 5, 0, false, 100},        // the tiny synthetic model
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrFormat("head_dim %d n_rot %d heads %d/%d tokens %d pad %d ff %d",
                                 c.head_dim, c.n_rot, c.q_heads, c.k_heads, c.tokens, c.q_pad,
                                 c.freq_factors));
    HostMat q = RandomMat(rng_, c.q_heads * c.head_dim, c.tokens, c.q_pad, 2.0f, 0.1f);
    HostMat k =
        c.k_heads > 0 ? RandomMat(rng_, c.k_heads * c.head_dim, c.tokens, 0, 1.5f) : HostMat{};
    std::vector<float> q_norm = RandomVector(rng_, c.head_dim, 0.5f, 1.5f);
    std::vector<float> k_norm = RandomVector(rng_, c.head_dim, 0.5f, 1.5f);
    std::vector<float> ff = RandomVector(rng_, c.n_rot / 2, 1.0f, 40.0f);
    std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
    std::uniform_int_distribution<int32_t> position(0, c.max_position);
    for (int32_t& p : positions) p = position(rng_);
    positions[0] = c.max_position;

    QkNormRopeParams params;
    params.head_dim = c.head_dim;
    params.eps = 1e-5f;
    params.n_rot = c.n_rot;
    params.base = 5000000.0f;
    HostMat cq = q, ck = k;
    params.q_norm = F32Weight(q_norm.data(), c.head_dim);
    params.k_norm = F32Weight(k_norm.data(), c.head_dim);
    if (c.freq_factors) params.freq_factors = ff;
    const TensorView cpu_k = c.k_heads > 0 ? ck.view() : TensorView{};
    ASSERT_TRUE(cpu_->QkNormRope(cq.view(), cpu_k, params, positions).ok());

    BackendBuffer dq_norm = UploadBytes(*cuda_, q_norm.data(), q_norm.size() * 4);
    BackendBuffer dk_norm = UploadBytes(*cuda_, k_norm.data(), k_norm.size() * 4);
    BackendBuffer dff = UploadBytes(*cuda_, ff.data(), ff.size() * 4);
    params.q_norm = F32Weight(dq_norm.data(), c.head_dim);
    params.k_norm = F32Weight(dk_norm.data(), c.head_dim);
    if (c.freq_factors) params.freq_factors = {static_cast<const float*>(dff.data()), ff.size()};
    DevMat dq = ToDevice(*cuda_, q);
    DevMat dk;
    if (c.k_heads > 0) dk = ToDevice(*cuda_, k);
    const absl::Status status = cuda_->QkNormRope(dq.view, dk.view, params, positions);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_LE(RelError(FromDevice(*cuda_, dq, cq), cq), kNormBound) << "q";
    if (c.k_heads > 0) {
      EXPECT_LE(RelError(FromDevice(*cuda_, dk, ck), ck), kNormBound) << "k";
    }
  }
}

// Double-precision selection scores of one row, for judging near-ties.
std::vector<double> HostScores(const HostMat& logits, int64_t r, const RouterParams& p,
                               const std::vector<float>& bias) {
  const int64_t n = logits.cols;
  std::vector<double> pi(static_cast<size_t>(n));
  if (p.gating == GatingFunc::kSigmoid) {
    for (int64_t e = 0; e < n; ++e) pi[e] = 1.0 / (1.0 + std::exp(-double{logits.at(r, e)}));
  } else {
    double max = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < n; ++e) max = std::max(max, double{logits.at(r, e)});
    for (int64_t e = 0; e < n; ++e) sum += (pi[e] = std::exp(logits.at(r, e) - max));
    for (double& v : pi) v /= sum;
  }
  if (!p.bias.empty()) {
    for (int64_t e = 0; e < n; ++e) pi[e] += bias[e];
  }
  return pi;
}

struct RouterCase {
  int64_t experts, top_k, rows, pad;
  GatingFunc gating;
  bool bias, normalize;
  float scale;
  bool quantized_logits;  // few distinct values: many exact ties, which must go to the lower id
};

void RunRouterCase(Backend& cpu, Backend& cuda, std::mt19937& rng, const RouterCase& c) {
  SCOPED_TRACE(
      absl::StrFormat("experts %d top_k %d rows %d pad %d gating %d bias %d norm %d "
                      "scale %g ties %d",
                      c.experts, c.top_k, c.rows, c.pad, static_cast<int>(c.gating), c.bias,
                      c.normalize, c.scale, c.quantized_logits));
  HostMat logits = RandomMat(rng, c.experts, c.rows, c.pad, 2.0f);
  if (c.quantized_logits) {
    for (float& v : logits.data) {
      if (v != kPadSentinel) v = std::round(v);
    }
  }
  std::vector<float> bias = RandomVector(rng, c.experts, -0.05f, 0.05f);
  RouterParams p;
  p.top_k = c.top_k;
  p.gating = c.gating;
  p.normalize = c.normalize;
  p.scale = c.scale;
  if (c.bias) p.bias = bias;
  const size_t n = static_cast<size_t>(c.rows * c.top_k);
  std::vector<int32_t> want_ids(n, -1);
  std::vector<float> want_weights(n, NAN);
  ASSERT_TRUE(cpu.RouterTopK(logits.view(), p, want_ids, want_weights).ok());

  DevMat dlogits = ToDevice(cuda, logits);
  BackendBuffer dbias = UploadBytes(cuda, bias.data(), bias.size() * 4);
  if (c.bias) p.bias = {static_cast<const float*>(dbias.data()), bias.size()};
  std::vector<int32_t> got_ids(n, -1);
  std::vector<float> got_weights(n, NAN);
  BackendBuffer dids = UploadBytes(cuda, got_ids.data(), n * 4);
  BackendBuffer dweights = UploadBytes(cuda, got_weights.data(), n * 4);
  ASSERT_TRUE(cuda.RouterTopK(dlogits.view, p, {static_cast<int32_t*>(dids.data()), n},
                              {static_cast<float*>(dweights.data()), n})
                  .ok());
  ASSERT_TRUE(cuda.Download(dids.data(), got_ids.data(), n * 4).ok());
  ASSERT_TRUE(cuda.Download(dweights.data(), got_weights.data(), n * 4).ok());

  int64_t mismatched = 0, near_ties = 0;
  bool weights_comparable = true;
  for (int64_t r = 0; r < c.rows; ++r) {
    std::vector<double> scores;
    for (int64_t k = 0; k < c.top_k; ++k) {
      const size_t i = static_cast<size_t>(r * c.top_k + k);
      if (got_ids[i] == want_ids[i]) continue;
      if (scores.empty()) scores = HostScores(logits, r, p, bias);
      const bool valid = got_ids[i] >= 0 && got_ids[i] < c.experts;
      if (!c.quantized_logits && valid &&
          std::fabs(scores[got_ids[i]] - scores[want_ids[i]]) < kRouterTieScore) {
        ++near_ties;  // float rounding may order a near-tie either way
        weights_comparable = false;
      } else {
        ++mismatched;
      }
    }
  }
  EXPECT_EQ(mismatched, 0) << "ids differ beyond ties (" << near_ties << " near-ties)";
  if (weights_comparable) {
    HostMat got_w{c.top_k, c.rows, c.top_k, got_weights};
    HostMat want_w{c.top_k, c.rows, c.top_k, want_weights};
    EXPECT_LE(RelError(got_w, want_w), kRouterWeightBound);
  }
}

TEST_F(PointwiseCudaTest, RouterTopKMatchesCpu) {
  using G = GatingFunc;
  const RouterCase cases[] = {
      {288, 8, 7, 0, G::kSigmoid, true, true, 3.0f, false},    // Step-3.5-like
      {288, 8, 1, 0, G::kSigmoid, true, true, 3.0f, false},    // decode: one row
      {288, 8, 513, 5, G::kSigmoid, true, true, 2.5f, false},  // prefill, padded rows
      {512, 16, 33, 0, G::kSoftmax, false, false, 1.0f, false},
      {512, 16, 7, 0, G::kSigmoid, true, false, 0.0f, false},
      {128, 1, 9, 0, G::kSoftmax, true, true, 1.0f, false},
      {8, 8, 5, 0, G::kSigmoid, false, true, 1.0f, false},  // top_k == experts
      {37, 5, 11, 3, G::kSoftmax, true, true, 3.0f, false},
      {288, 8, 64, 0, G::kSigmoid, false, true, 3.0f, true},  // exact ties: lower id first
      {512, 16, 64, 0, G::kSoftmax, false, false, 1.0f, true},
  };
  for (const RouterCase& c : cases) RunRouterCase(*cpu_, *cuda_, rng_, c);
}

// Bad operands give the CPU backend's error, word for word; zero rows are a no-op.
TEST_F(PointwiseCudaTest, RejectsBadShapesLikeCpu) {
  HostMat x = RandomMat(rng_, 64, 3, 0, 1.0f);
  HostMat wrong = PoisonedMat(64, 2, 0);
  std::vector<float> weight(64, 1.0f);
  DevMat dx = ToDevice(*cuda_, x), dwrong = ToDevice(*cuda_, wrong);
  BackendBuffer dweight = UploadBytes(*cuda_, weight.data(), 256);

  auto same = [](const absl::Status& cpu, const absl::Status& cuda) {
    EXPECT_FALSE(cpu.ok());
    EXPECT_EQ(cpu.code(), cuda.code());
    EXPECT_EQ(cpu.message(), cuda.message());
  };
  same(cpu_->RmsNorm(x.view(), F32Weight(weight.data(), 64), 1e-5f, wrong.view()),
       cuda_->RmsNorm(dx.view, F32Weight(dweight.data(), 64), 1e-5f, dwrong.view));
  same(cpu_->RmsNorm(x.view(), F32Weight(weight.data(), 32), 1e-5f, x.view()),
       cuda_->RmsNorm(dx.view, F32Weight(dweight.data(), 32), 1e-5f, dx.view));
  same(cpu_->Add(x.view(), wrong.view(), x.view()), cuda_->Add(dx.view, dwrong.view, dx.view));
  same(cpu_->SwiGlu(x.view(), x.view(), 0.0f, wrong.view()),
       cuda_->SwiGlu(dx.view, dx.view, 0.0f, dwrong.view));
  same(cpu_->HeadGate(x.view(), x.view(), 3), cuda_->HeadGate(dx.view, dx.view, 3));

  QkNormRopeParams p;
  p.head_dim = 64;
  p.n_rot = 64;
  p.q_norm = F32Weight(weight.data(), 64);
  p.k_norm = F32Weight(weight.data(), 64);
  const std::vector<int32_t> two_positions = {0, 1};
  same(cpu_->QkNormRope(x.view(), {}, p, two_positions),
       cuda_->QkNormRope(dx.view, {}, p, two_positions));
  const std::vector<int32_t> negative = {0, -1, 2};
  HostMat cx = x;
  same(cpu_->QkNormRope(cx.view(), {}, p, negative), cuda_->QkNormRope(dx.view, {}, p, negative));
  p.n_rot = 3;
  const std::vector<int32_t> three_positions = {0, 1, 2};
  EXPECT_EQ(cuda_->QkNormRope(dx.view, {}, p, three_positions).code(),
            absl::StatusCode::kInvalidArgument);

  RouterParams rp;
  rp.top_k = 4;
  std::vector<int32_t> ids(8);
  std::vector<float> weights(8);
  same(cpu_->RouterTopK(x.view(), rp, ids, weights), cuda_->RouterTopK(dx.view, rp, ids, weights));

  // Zero rows: validated, nothing launched.
  TensorView dempty = TensorView::F32(dx.view.f32(), 64, 0);
  EXPECT_TRUE(cuda_->Add(dempty, dempty, dempty).ok());
  EXPECT_TRUE(cuda_->RmsNorm(dempty, F32Weight(dweight.data(), 64), 1e-5f, dempty).ok());
  EXPECT_TRUE(cuda_->Synchronize().ok());
}

// LogitsTopK through the backend: the same ids, values and argmax as the CPU backend (the
// kernels' own tests are in logits_topk_cuda_test), log-sum-exp within 1e-5 relative; padded
// rows; outputs poisoned first.
TEST_F(PointwiseCudaTest, LogitsTopKMatchesCpu) {
  for (const Shape& s : {Shape{128896, 3, 4}, Shape{1000, 64, 0}, Shape{7, 2, 1}}) {
    const int32_t k = 20;
    HostMat x = RandomMat(rng_, s.cols, s.rows, s.pad, 8.0f, 0.0f);
    DevMat dx = ToDevice(*cuda_, x);
    const size_t n = static_cast<size_t>(s.rows * k), m = static_cast<size_t>(s.rows);
    std::vector<int32_t> want_ids(n, -7), got_ids(n, -7), want_argmax(m, -7), got_argmax(m, -7);
    std::vector<float> want_values(n, NAN), got_values(n, NAN), want_lse(m, NAN), got_lse(m, NAN);
    const TensorView host_view = TensorView::F32(x.data.data(), s.cols, s.rows, s.cols + s.pad);
    ASSERT_TRUE(
        cpu_->LogitsTopK(host_view, k,
                         {want_ids.data(), want_values.data(), want_argmax.data(), want_lse.data()})
            .ok());
    BackendBuffer ids = UploadBytes(*cuda_, got_ids.data(), n * 4);
    BackendBuffer values = UploadBytes(*cuda_, got_values.data(), n * 4);
    BackendBuffer argmax = UploadBytes(*cuda_, got_argmax.data(), m * 4);
    BackendBuffer lse = UploadBytes(*cuda_, got_lse.data(), m * 4);
    ASSERT_TRUE(cuda_
                    ->LogitsTopK(dx.view, k,
                                 {static_cast<int32_t*>(ids.data()), values.f32(),
                                  static_cast<int32_t*>(argmax.data()), lse.f32()})
                    .ok())
        << Describe(s);
    ASSERT_TRUE(cuda_->Download(ids.data(), got_ids.data(), n * 4).ok());
    ASSERT_TRUE(cuda_->Download(values.data(), got_values.data(), n * 4).ok());
    ASSERT_TRUE(cuda_->Download(argmax.data(), got_argmax.data(), m * 4).ok());
    ASSERT_TRUE(cuda_->Download(lse.data(), got_lse.data(), m * 4).ok());
    const size_t kept = std::min<size_t>(static_cast<size_t>(k), static_cast<size_t>(s.cols));
    for (size_t r = 0; r < m; ++r) {
      EXPECT_EQ(got_argmax[r], want_argmax[r]) << Describe(s) << " row " << r;
      EXPECT_NEAR(got_lse[r], want_lse[r], 1e-5 * std::max(1.0f, std::fabs(want_lse[r])));
      for (size_t j = 0; j < kept; ++j) {
        EXPECT_EQ(got_ids[r * k + j], want_ids[r * k + j]) << Describe(s) << " row " << r;
        EXPECT_EQ(got_values[r * k + j], want_values[r * k + j]);
      }
    }
  }
}

}  // namespace
}  // namespace stepserve
