// LogitsTopKCuda (kernels/sampling/logits_topk_cuda.h) against LogitsTopKRef on fresh random
// logits (std::mt19937, seed printed): vocab 1, 7, 1000, 4097, 128896 and 150001 (one chunk, a
// partial second chunk, 32 chunks, 37 chunks: with k = 256 more survivors than the row CTA keeps in
// registers), rows 1, 3 and 64, k 1, 40, 256 and k > vocab; smooth rows, heavy ties
// (7 distinct values), rows sprinkled with -inf / NaN / signed zeros and rows with no finite
// value; padded rows (row_stride > vocab, the padding holds +inf, which would win if read). Every
// output and the scratch start poisoned (0xFF bytes: id -1, NaN). Bounds: ids, argmax, top
// logits and row_max bit for bit; log_sum_exp |gpu - ref| <= 1e-5 * max(1, |ref|) (the header's
// bound). Also: null outputs (the argmax-only path), capture in a CUDA graph and replay on new
// data, and the argument checks.
#include "kernels/sampling/logits_topk_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/sampling/logits_topk.h"

namespace stepserve::kernels {
namespace {

constexpr const char* kNoDeviceMessage = "no CUDA device visible; GPU test skipped";
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kLseBound = 1e-5;

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

// Device memory freed on scope exit; starts filled with 0xFF bytes.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ == 0) return;
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_), cudaSuccess);
    Poison();
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Poison() { EXPECT_EQ(cudaMemset(ptr_, 0xFF, bytes_), cudaSuccess); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size() * sizeof(T), bytes_);
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct Shape {
  int64_t rows, vocab, stride;
  int32_t k;
  std::string Name() const {
    return "rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " stride " +
           std::to_string(stride) + " k " + std::to_string(k);
  }
};

// Which outputs a call asks for.
struct Wanted {
  bool ids = true, logits = true, argmax = true, row_max = true, lse = true;
};

// Host results (reference or downloaded). Unwritten slots keep the 0xFF poison.
struct Results {
  std::vector<int32_t> top_ids, argmax;
  std::vector<float> top_logits, row_max, lse;
};

Results PoisonedResults(const Shape& s) {
  float nan_ff;
  const uint32_t ff = 0xFFFFFFFFu;
  std::memcpy(&nan_ff, &ff, sizeof(ff));
  return Results{std::vector<int32_t>(s.rows * s.k, -1), std::vector<int32_t>(s.rows, -1),
                 std::vector<float>(s.rows * s.k, nan_ff), std::vector<float>(s.rows, nan_ff),
                 std::vector<float>(s.rows, nan_ff)};
}

Results Reference(const std::vector<float>& x, const Shape& s, const Wanted& w) {
  Results r = PoisonedResults(s);
  const LogitsTopKArgs a{x.data(),
                         s.rows,
                         s.vocab,
                         s.stride,
                         s.k,
                         w.ids ? r.top_ids.data() : nullptr,
                         w.logits ? r.top_logits.data() : nullptr,
                         w.argmax ? r.argmax.data() : nullptr,
                         w.row_max ? r.row_max.data() : nullptr,
                         w.lse ? r.lse.data() : nullptr};
  EXPECT_EQ(LogitsTopKRef(a), KernelStatus::kOk);
  return r;
}

// Device outputs of one shape, poisoned.
struct DeviceOutputs {
  DeviceBuffer top_ids, top_logits, argmax, row_max, lse, scratch;
  explicit DeviceOutputs(const Shape& s)
      : top_ids(s.rows * s.k * 4),
        top_logits(s.rows * s.k * 4),
        argmax(s.rows * 4),
        row_max(s.rows * 4),
        lse(s.rows * 4),
        scratch(LogitsTopKCudaScratchBytes(s.rows, s.vocab, s.k)) {}

  LogitsTopKArgs Args(const DeviceBuffer& logits, const Shape& s, const Wanted& w) const {
    return LogitsTopKArgs{logits.as<const float>(),
                          s.rows,
                          s.vocab,
                          s.stride,
                          s.k,
                          w.ids ? top_ids.as<int32_t>() : nullptr,
                          w.logits ? top_logits.as<float>() : nullptr,
                          w.argmax ? argmax.as<int32_t>() : nullptr,
                          w.row_max ? row_max.as<float>() : nullptr,
                          w.lse ? lse.as<float>() : nullptr};
  }
  Results Download() const {
    return Results{top_ids.Download<int32_t>(), argmax.Download<int32_t>(),
                   top_logits.Download<float>(), row_max.Download<float>(), lse.Download<float>()};
  }
};

void ExpectSame(const Results& got, const Results& ref, const Shape& s) {
  for (int64_t r = 0; r < s.rows; ++r) {
    ASSERT_EQ(got.argmax[r], ref.argmax[r]) << "row " << r;
    ASSERT_EQ(Bits(got.row_max[r]), Bits(ref.row_max[r])) << "row " << r << " " << got.row_max[r];
    const float g = got.lse[r], e = ref.lse[r];
    if (std::isinf(e) || std::isnan(e)) {
      ASSERT_EQ(Bits(g), Bits(e)) << "row " << r << " lse " << g << " vs " << e;
    } else {
      ASSERT_LE(std::fabs(double{g} - e), kLseBound * std::max(1.0, std::fabs(double{e})))
          << "row " << r << " lse " << g << " vs " << e;
    }
    for (int32_t j = 0; j < s.k; ++j) {
      const int64_t i = r * s.k + j;
      ASSERT_EQ(got.top_ids[i], ref.top_ids[i]) << "row " << r << " slot " << j;
      ASSERT_EQ(Bits(got.top_logits[i]), Bits(ref.top_logits[i])) << "row " << r << " slot " << j;
    }
  }
}

enum class Kind { kNormal, kTies, kSpecial };

std::vector<float> RandomLogits(std::mt19937& rng, const Shape& s, Kind kind) {
  std::vector<float> x(s.rows * s.stride, kInf);  // padding: would win everything if read
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> level(-3, 3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t r = 0; r < s.rows; ++r) {
    float* row = x.data() + r * s.stride;
    for (int64_t i = 0; i < s.vocab; ++i) {
      float v = normal(rng);
      if (kind == Kind::kTies) v = 0.5f * level(rng);
      if (kind == Kind::kSpecial) {
        const float p = u(rng);
        if (p < 0.10f) {
          v = -kInf;
        } else if (p < 0.15f) {
          v = kNaN;
        } else if (p < 0.17f) {
          v = p < 0.16f ? -0.0f : 0.0f;
        }
      }
      row[i] = v;
    }
    if (kind == Kind::kSpecial && (r == 1 || r == 7 || r == 40)) {
      for (int64_t i = 0; i < s.vocab; ++i) row[i] = u(rng) < 0.5f ? -kInf : kNaN;
    }
  }
  return x;
}

class LogitsTopKCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << kNoDeviceMessage;
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", static_cast<int>(seed_));
    std::printf("seed %u\n", seed_);
  }

  // One call on `x`, compared with the reference.
  void Check(const std::vector<float>& x, const Shape& s, const Wanted& w = {}) {
    SCOPED_TRACE("seed " + std::to_string(seed_) + " " + s.Name());
    DeviceBuffer logits(x.size() * 4);
    logits.Upload(x);
    DeviceOutputs out(s);
    ASSERT_EQ(
        LogitsTopKCuda(out.Args(logits, s, w), out.scratch.data(), out.scratch.bytes(), nullptr),
        KernelStatus::kOk);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ExpectSame(out.Download(), Reference(x, s, w), s);
  }

  unsigned seed_ = 0;
  std::mt19937 rng_;
};

TEST_F(LogitsTopKCudaTest, RandomRowsMatchReference) {
  for (int64_t vocab : {1, 7, 1000, 4097, 128896, 150001}) {
    for (int64_t rows : {1, 3, 64}) {
      if (vocab == 150001 && rows == 64) continue;  // k = 256 there: the L2 path, see below
      for (Kind kind : {Kind::kNormal, Kind::kTies, Kind::kSpecial}) {
        std::vector<int32_t> ks = {1, 40, 256};
        if (vocab + 3 < 256) ks.push_back(static_cast<int32_t>(vocab + 3));
        const int64_t stride = vocab + (rows == 3 ? 5 : 0);
        const std::vector<float> x = RandomLogits(rng_, {rows, vocab, stride, 1}, kind);
        for (int32_t k : ks) {
          SCOPED_TRACE("kind " + std::to_string(static_cast<int>(kind)));
          Check(x, {rows, vocab, stride, k});
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_F(LogitsTopKCudaTest, HandMadeRowsAcrossChunks) {
  const int64_t vocab = 2 * kLogitsTopKChunk + 1000;
  const int64_t rows = 6;
  std::vector<float> x(rows * vocab, 1.0f);  // row 0: all equal (ties everywhere)
  float* row = x.data() + 1 * vocab;         // row 1: all -inf
  std::fill(row, row + vocab, -kInf);
  row = x.data() + 2 * vocab;  // row 2: all NaN
  std::fill(row, row + vocab, kNaN);
  row = x.data() + 3 * vocab;  // row 3: +inf in two chunks
  std::fill(row, row + vocab, -1.0f);
  row[5000] = kInf;
  row[100] = kInf;
  row[9000] = 7.0f;
  row = x.data() + 4 * vocab;  // row 4: -0.0 is the max, in the second chunk, +0.0 later
  std::fill(row, row + vocab, -3.0f);
  row[4096 + 17] = -0.0f;
  row[8500] = 0.0f;
  row = x.data() + 5 * vocab;  // row 5: the max value tied across chunk boundaries
  std::uniform_real_distribution<float> u(-10.0f, 0.0f);
  for (int64_t i = 0; i < vocab; ++i) row[i] = u(rng_);
  for (int64_t i : {4095, 4096, 8191, 8192, 9000, 12}) row[i] = 2.5f;
  for (int32_t k : {1, 2, 40, 256}) {
    Check(x, {rows, vocab, vocab, k});
    if (HasFatalFailure()) return;
  }
}

TEST_F(LogitsTopKCudaTest, NullOutputsComputeTheRest) {
  const Shape s{5, 128896, 128896, 256};
  const std::vector<float> x = RandomLogits(rng_, s, Kind::kSpecial);
  Wanted argmax_only{.ids = false, .logits = false, .row_max = false, .lse = false};
  Check(x, s, argmax_only);
  Check(x, s, Wanted{.ids = false, .logits = false});  // no top output: the k = 1 path
  Check(x, s, Wanted{.ids = false, .argmax = false});
  Check(x, s, Wanted{.logits = false, .lse = false});
}

TEST_F(LogitsTopKCudaTest, CapturedGraphReplaysOnNewData) {
  const Shape s{64, 128896, 128896, 40};
  std::vector<float> x = RandomLogits(rng_, s, Kind::kNormal);
  DeviceBuffer logits(x.size() * 4);
  logits.Upload(x);
  DeviceOutputs out(s);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const KernelStatus status =
      LogitsTopKCuda(out.Args(logits, s, {}), out.scratch.data(), out.scratch.bytes(), stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(status, KernelStatus::kOk);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (Kind kind : {Kind::kNormal, Kind::kTies, Kind::kSpecial}) {
    SCOPED_TRACE("kind " + std::to_string(static_cast<int>(kind)));
    x = RandomLogits(rng_, s, kind);
    logits.Upload(x);
    out.top_ids.Poison();
    out.top_logits.Poison();
    out.argmax.Poison();
    out.row_max.Poison();
    out.lse.Poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ExpectSame(out.Download(), Reference(x, s, {}), s);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(LogitsTopKCudaTest, RejectsBadArguments) {
  const Shape s{2, 1000, 1000, 8};
  DeviceBuffer logits(s.rows * s.vocab * 4);
  DeviceOutputs out(s);
  const LogitsTopKArgs good = out.Args(logits, s, {});
  void* scratch = out.scratch.data();
  const size_t bytes = out.scratch.bytes();
  EXPECT_EQ(bytes, static_cast<size_t>(2 * 1 * (8 * 8 + 8)));
  EXPECT_EQ(LogitsTopKCuda(good, nullptr, bytes, nullptr), KernelStatus::kInvalidArgument);
  EXPECT_EQ(LogitsTopKCuda(good, scratch, bytes - 1, nullptr), KernelStatus::kInvalidArgument);
  DeviceBuffer larger(bytes + 8);
  EXPECT_EQ(LogitsTopKCuda(good, larger.as<char>() + 4, bytes, nullptr),
            KernelStatus::kInvalidArgument);  // not 8-byte aligned
  LogitsTopKArgs a = good;
  a.k = kLogitsTopKMaxK + 1;
  EXPECT_EQ(LogitsTopKCuda(a, scratch, bytes, nullptr), KernelStatus::kTooLarge);
  a = good;
  a.row_stride = a.vocab - 1;
  EXPECT_EQ(LogitsTopKCuda(a, scratch, bytes, nullptr), KernelStatus::kInvalidArgument);
  a = good;
  a.rows = 0;
  EXPECT_EQ(LogitsTopKCuda(a, nullptr, 0, nullptr), KernelStatus::kOk);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int32_t id : out.argmax.Download<int32_t>()) EXPECT_EQ(id, -1);  // nothing was launched
  EXPECT_EQ(LogitsTopKCudaScratchBytes(64, 128896, 256), size_t{64} * 32 * (256 * 8 + 8));
  EXPECT_EQ(LogitsTopKCudaScratchBytes(0, 128896, 256), 0u);
}

}  // namespace
}  // namespace stepserve::kernels
