// Optimised CPU paged attention. Decode attention is bound by reading K and V, so each task owns
// one (query row, KV head) pair and lets all the query heads of that GQA group consume each key
// and value while it is in cache. Softmax is computed online (running max and sum, rescaled per
// chunk of keys), which equals the plain softmax up to rounding and needs no score buffer.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/quant/float16.h"
#include "engine/quant/quant.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/common/vec.h"

namespace stepserve::kernels {
namespace {

constexpr int64_t kHeadsPerPass = 16;  // query heads sharing one pass over the keys
constexpr int64_t kKeysPerChunk = 32;  // keys scored before one softmax rescale

// Points at one K or V vector (element `index` = vector index * dh); converts F16 or Q8_0 into
// `tmp` first.
const float* KvVector(const void* base, KvDtype dtype, int64_t index, int64_t dh, float* tmp) {
  if (dtype == KvDtype::kF32) return static_cast<const float*>(base) + index;
  if (dtype == KvDtype::kQ8_0) {
    const auto* vec = static_cast<const uint8_t*>(base) + index / dh * KvVectorBytes(dtype, dh);
    // Cannot fail for a head_dim ValidatePagedKv accepted.
    (void)quant::DequantizeRow(GgmlType::kQ8_0, vec, tmp, dh);
    return tmp;
  }
  const uint16_t* src = static_cast<const uint16_t*>(base) + index;
  for (int64_t d = 0; d < dh; ++d) tmp[d] = F16ToF32(src[d]);
  return tmp;
}

void AttendGroup(const PagedAttentionArgs& a, const AttentionSeq& seq, int64_t row, int64_t g) {
  const PagedKv& kv = a.kv;
  const int64_t dh = kv.head_dim;
  const int64_t group = a.heads / kv.kv_heads;
  const int64_t p = a.positions[row];
  const int64_t first = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
  alignas(64) float acc[kHeadsPerPass][kMaxAttentionHeadDim];
  alignas(64) float k_tmp[kMaxAttentionHeadDim];
  alignas(64) float v_tmp[kMaxAttentionHeadDim];
  float probs[kHeadsPerPass][kKeysPerChunk];
  float run_max[kHeadsPerPass];
  float run_sum[kHeadsPerPass];
  for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += kHeadsPerPass) {
    const int64_t nh = std::min(kHeadsPerPass, (g + 1) * group - h0);
    const float* q[kHeadsPerPass];
    for (int64_t i = 0; i < nh; ++i) {
      q[i] = a.q + row * a.q_stride + (h0 + i) * dh;
      run_max[i] = -INFINITY;
      run_sum[i] = 0.0f;
      std::memset(acc[i], 0, dh * sizeof(float));
    }
    for (int64_t lo = first; lo <= p;) {
      // A chunk stays inside one page so its slots are evenly spaced.
      const int64_t page_end = (lo / kv.block_size + 1) * kv.block_size;
      const int64_t hi = std::min({p + 1, page_end, lo + kKeysPerChunk});
      const int64_t page = seq.block_table[lo / kv.block_size];
      const int64_t slot0 = page * kv.block_size + lo % kv.block_size;
      const int64_t n = hi - lo;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t index = ((slot0 + j) * kv.kv_heads + g) * dh;
        const float* k = KvVector(kv.k, kv.dtype, index, dh, k_tmp);
        for (int64_t i = 0; i < nh; ++i) probs[i][j] = VecDot(q[i], k, dh) * a.scale;
      }
      for (int64_t i = 0; i < nh; ++i) {
        float chunk_max = probs[i][0];
        for (int64_t j = 1; j < n; ++j) chunk_max = std::max(chunk_max, probs[i][j]);
        if (chunk_max > run_max[i]) {
          // exp(-inf) = 0 also clears the (empty) state on the first chunk.
          const float correction = std::exp(run_max[i] - chunk_max);
          run_sum[i] *= correction;
          VecScale(correction, acc[i], dh);
          run_max[i] = chunk_max;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          probs[i][j] = std::exp(probs[i][j] - run_max[i]);
          sum += probs[i][j];
        }
        run_sum[i] += sum;
      }
      for (int64_t j = 0; j < n; ++j) {
        const int64_t index = ((slot0 + j) * kv.kv_heads + g) * dh;
        const float* v = KvVector(kv.v, kv.dtype, index, dh, v_tmp);
        for (int64_t i = 0; i < nh; ++i) VecAxpy(probs[i][j], v, acc[i], dh);
      }
      lo = hi;
    }
    for (int64_t i = 0; i < nh; ++i) {
      float* out = a.out + row * a.out_stride + (h0 + i) * dh;
      const float inv = 1.0f / run_sum[i];  // >= 1: the row's own position is always visible
      for (int64_t d = 0; d < dh; ++d) out[d] = acc[i][d] * inv;
    }
  }
}

}  // namespace

KernelStatus PagedAttentionCpu(const PagedAttentionArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidatePagedAttention(a); s != KernelStatus::kOk) return s;
  // Flatten (sequence, row) so tasks index rows directly; rows of a sequence are contiguous.
  int64_t total_rows = 0;
  for (int64_t s = 0; s < a.n_seqs; ++s) total_rows += a.seqs[s].q_count;
  const int64_t groups = a.kv.kv_heads;
  auto body = [&](int64_t begin, int64_t end) {
    // Locate the sequence of task `begin`, then walk forward.
    int64_t s = 0;
    int64_t row_in_batch = begin / groups;
    int64_t before = 0;
    while (before + a.seqs[s].q_count <= row_in_batch) before += a.seqs[s++].q_count;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t flat_row = task / groups;
      while (before + a.seqs[s].q_count <= flat_row) before += a.seqs[s++].q_count;
      const AttentionSeq& seq = a.seqs[s];
      AttendGroup(a, seq, seq.q_begin + (flat_row - before), task % groups);
    }
  };
  const int64_t tasks = total_rows * groups;
  if (pool == nullptr) {
    body(0, tasks);
  } else {
    pool->ParallelFor(tasks, 1, body);
  }
  return KernelStatus::kOk;
}

KernelStatus KvAppendCpu(const KvAppendArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateKvAppend(a); s != KernelStatus::kOk) return s;
  const int64_t width = a.kv.kv_heads * a.kv.head_dim;
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (a.slots[t] < 0) continue;
      const int64_t dst = a.slots[t] * width;
      if (a.kv.dtype == KvDtype::kQ8_0) {
        KvAppendQ8Token(a, t);
      } else if (a.kv.dtype == KvDtype::kF32) {
        std::memcpy(static_cast<float*>(a.kv.k) + dst, a.k + t * a.k_stride, width * 4);
        std::memcpy(static_cast<float*>(a.kv.v) + dst, a.v + t * a.v_stride, width * 4);
      } else {
        uint16_t* k = static_cast<uint16_t*>(a.kv.k) + dst;
        uint16_t* v = static_cast<uint16_t*>(a.kv.v) + dst;
        for (int64_t i = 0; i < width; ++i) {
          k[i] = F32ToF16(a.k[t * a.k_stride + i]);
          v[i] = F32ToF16(a.v[t * a.v_stride + i]);
        }
      }
    }
  };
  if (pool == nullptr || a.tokens < 64) {
    body(0, a.tokens);
  } else {
    pool->ParallelFor(a.tokens, 16, body);
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
