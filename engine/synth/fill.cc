#include "engine/synth/fill.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numbers>
#include <thread>

#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"

namespace stepserve::synth {
namespace {

// About this many elements per chunk: large enough to amortise thread hand-off, small enough
// that the float staging buffer per thread stays a few MB.
constexpr int64_t kChunkElements = int64_t{1} << 20;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Uniform in [0, 1) with 24 random bits (exact in float).
  float Uniform() { return float(SplitMix64(state_) >> 40) * 0x1.0p-24f; }
  float Gaussian() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // Box-Muller; u1 in (0, 1] so the log is finite.
    const double u1 = (double(SplitMix64(state_) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(SplitMix64(state_) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double phi = 2.0 * std::numbers::pi * u2;
    spare_ = float(r * std::sin(phi));
    has_spare_ = true;
    return float(r * std::cos(phi));
  }

 private:
  uint64_t state_;
  float spare_ = 0.0f;
  bool has_spare_ = false;
};

uint64_t ChunkSeed(uint64_t tensor_seed, int64_t chunk) {
  uint64_t s = tensor_seed ^ (uint64_t(chunk) * 0xD1B54A32D192ED03ull);
  return SplitMix64(s);
}

absl::Status FillSmallF32(const TensorSpec& spec, const std::vector<float>& rope_freqs,
                          uint64_t tensor_seed, uint8_t* dst) {
  const int64_t n = spec.n_elements();
  std::vector<float> v(static_cast<size_t>(n));
  Rng rng(ChunkSeed(tensor_seed, 0));
  switch (spec.fill) {
    case FillKind::kNorm:
      for (float& x : v) x = 1.0f + spec.scale * (2.0f * rng.Uniform() - 1.0f);
      break;
    case FillKind::kUniform:
      for (float& x : v) x = spec.scale * (2.0f * rng.Uniform() - 1.0f);
      break;
    case FillKind::kRopeFreqs:
      if (rope_freqs.size() != static_cast<size_t>(n)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor %s: %d elements but %d rope_freqs values", spec.name, n, rope_freqs.size()));
      }
      v = rope_freqs;
      break;
    default:
      return absl::InternalError(absl::StrFormat("tensor %s: not a small F32 fill", spec.name));
  }
  std::memcpy(dst, v.data(), v.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

uint64_t TensorSeed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the name, mixed with the user seed
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  uint64_t s = seed ^ h;
  return SplitMix64(s);
}

absl::Status FillTensor(const TensorSpec& spec, const std::vector<float>& rope_freqs, uint64_t seed,
                        int threads, uint8_t* dst, uint64_t nbytes) {
  if (spec.nbytes() < 0 || nbytes != static_cast<uint64_t>(spec.nbytes())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: asked to fill %d bytes, plan says %d", spec.name, nbytes, spec.nbytes()));
  }
  const uint64_t tensor_seed = TensorSeed(seed, spec.name);
  if (spec.fill != FillKind::kMatrix && spec.fill != FillKind::kRouter) {
    if (spec.type != GgmlType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %s: norm/bias/rope tensors must be F32", spec.name));
    }
    return FillSmallF32(spec, rope_freqs, tensor_seed, dst);
  }

  const GgmlType type = spec.type;
  const bool quantize = quant::CanQuantize(type) && !spec.random_blocks;
  if (!quantize && !quant::CanFillRandom(type)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: cannot generate blocks of type %s", spec.name, GgmlTypeName(type)));
  }
  const int64_t row_elems = spec.row_elements();
  const int64_t row_bytes = RowBytes(type, row_elems);
  if (row_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: row of %d elements is not a multiple of the %s block",
                        spec.name, row_elems, GgmlTypeName(type)));
  }
  const int64_t blocks_per_row = row_elems / TypeInfo(type).block_elems;
  const int64_t rows = spec.n_rows();
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / row_elems);
  const int64_t n_chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;

  std::atomic<int64_t> next{0};
  std::mutex error_mu;
  absl::Status error;
  auto worker = [&] {
    std::vector<float> staging;
    for (int64_t chunk = next++; chunk < n_chunks; chunk = next++) {
      const int64_t row0 = chunk * rows_per_chunk;
      const int64_t n_rows_here = std::min(rows_per_chunk, rows - row0);
      uint8_t* out = dst + row0 * row_bytes;
      const uint64_t chunk_seed = ChunkSeed(tensor_seed, chunk);
      absl::Status s;
      if (quantize) {
        staging.resize(static_cast<size_t>(n_rows_here * row_elems));
        Rng rng(chunk_seed);
        for (float& x : staging) x = spec.scale * rng.Gaussian();
        s = quant::QuantizeRow(type, staging.data(), out, n_rows_here * row_elems);
      } else {
        s = quant::FillRandomBlocks(type, out, n_rows_here * blocks_per_row, chunk_seed,
                                    spec.scale);
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.ok()) {
          error = absl::Status(s.code(), absl::StrFormat("tensor %s, rows %d..%d: %s", spec.name,
                                                         row0, row0 + n_rows_here, s.message()));
        }
        next = n_chunks;  // stop the others early
        return;
      }
    }
  };
  int n_threads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  n_threads = static_cast<int>(std::clamp<int64_t>(n_threads, 1, n_chunks));
  if (n_threads == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(n_threads));
    for (int i = 0; i < n_threads; ++i) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }
  return error;
}

}  // namespace stepserve::synth
