// Reference attention: for every query row and head, gather the visible positions densely,
// softmax in double, weighted sum in double. Also the plain KV append and shared validation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/quant/float16.h"
#include "engine/quant/quant.h"
#include "kernels/attention/paged_attention.h"

namespace stepserve::kernels {
namespace {

// Element `index` (vector index / dh, element index % dh) of a cache array.
float LoadKv(const void* base, KvDtype dtype, int64_t index, int64_t dh) {
  if (dtype == KvDtype::kF16) return F16ToF32(static_cast<const uint16_t*>(base)[index]);
  if (dtype == KvDtype::kQ8_0) {
    const int64_t d = index % dh;
    const auto* block = static_cast<const uint8_t*>(base) +
                        (index / dh) * KvVectorBytes(dtype, dh) +
                        d / kKvQ8BlockElems * kKvQ8BlockBytes;
    uint16_t scale;
    std::memcpy(&scale, block, 2);
    return F16ToF32(scale) *
           static_cast<float>(static_cast<int8_t>(block[2 + d % kKvQ8BlockElems]));
  }
  return static_cast<const float*>(base)[index];
}

KernelStatus ValidatePagedKv(const PagedKv& kv) {
  if (kv.k == nullptr || kv.v == nullptr) return KernelStatus::kInvalidArgument;
  if (kv.num_blocks <= 0 || kv.block_size <= 0 || kv.kv_heads <= 0 || kv.head_dim <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (kv.dtype != KvDtype::kF32 && kv.dtype != KvDtype::kF16 && kv.dtype != KvDtype::kQ8_0) {
    return KernelStatus::kUnsupportedType;
  }
  if (KvVectorBytes(kv.dtype, kv.head_dim) == 0) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace

int64_t KvVectorBytes(KvDtype dtype, int64_t head_dim) {
  switch (dtype) {
    case KvDtype::kF32:
      return 4 * head_dim;
    case KvDtype::kF16:
      return 2 * head_dim;
    case KvDtype::kQ8_0:
      return head_dim % kKvQ8BlockElems == 0 ? head_dim / kKvQ8BlockElems * kKvQ8BlockBytes : 0;
  }
  return 0;
}

void KvAppendQ8Token(const KvAppendArgs& a, int64_t t) {
  const int64_t dh = a.kv.head_dim, vec_bytes = KvVectorBytes(a.kv.dtype, dh);
  for (int64_t g = 0; g < a.kv.kv_heads; ++g) {
    const int64_t at = (a.slots[t] * a.kv.kv_heads + g) * vec_bytes;
    // GGUF Q8_0 blocks; cannot fail for a head_dim ValidatePagedKv accepted.
    (void)quant::QuantizeRow(GgmlType::kQ8_0, a.k + t * a.k_stride + g * dh,
                             static_cast<uint8_t*>(a.kv.k) + at, dh);
    (void)quant::QuantizeRow(GgmlType::kQ8_0, a.v + t * a.v_stride + g * dh,
                             static_cast<uint8_t*>(a.kv.v) + at, dh);
  }
}

KernelStatus ValidatePagedAttention(const PagedAttentionArgs& a) {
  if (KernelStatus s = ValidatePagedKv(a.kv); s != KernelStatus::kOk) return s;
  if (a.kv.head_dim > kMaxAttentionHeadDim) return KernelStatus::kTooLarge;
  if (a.q == nullptr || a.out == nullptr || a.positions == nullptr || a.seqs == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.heads <= 0 || a.heads % a.kv.kv_heads != 0 || a.window < 0 || a.n_seqs < 0) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t width = a.heads * a.kv.head_dim;
  if (a.q_stride < width || a.out_stride < width || !(a.scale > 0.0f)) {
    return KernelStatus::kInvalidArgument;
  }
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    const AttentionSeq& seq = a.seqs[s];
    if (seq.q_begin < 0 || seq.q_count < 0 || seq.context_len < 0) {
      return KernelStatus::kInvalidArgument;
    }
    if (seq.q_count > 0 && seq.block_table == nullptr) return KernelStatus::kInvalidArgument;
    if (seq.block_table_len * a.kv.block_size < seq.context_len) {
      return KernelStatus::kOutOfRange;
    }
    for (int64_t r = seq.q_begin; r < seq.q_begin + seq.q_count; ++r) {
      const int64_t p = a.positions[r];
      if (p < 0 || p >= seq.context_len) return KernelStatus::kOutOfRange;
      // Every page the query reads must be a real page.
      const int64_t first = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
      for (int64_t b = first / a.kv.block_size; b <= p / a.kv.block_size; ++b) {
        if (seq.block_table[b] < 0 || seq.block_table[b] >= a.kv.num_blocks) {
          return KernelStatus::kOutOfRange;
        }
      }
    }
  }
  return KernelStatus::kOk;
}

KernelStatus PagedAttentionRef(const PagedAttentionArgs& a) {
  if (KernelStatus s = ValidatePagedAttention(a); s != KernelStatus::kOk) return s;
  const PagedKv& kv = a.kv;
  const int64_t dh = kv.head_dim;
  const int64_t group = a.heads / kv.kv_heads;
  std::vector<double> scores;
  std::vector<double> acc(dh);
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    const AttentionSeq& seq = a.seqs[s];
    for (int64_t r = seq.q_begin; r < seq.q_begin + seq.q_count; ++r) {
      const int64_t p = a.positions[r];
      const int64_t first = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
      for (int64_t h = 0; h < a.heads; ++h) {
        const int64_t g = h / group;
        const float* q = a.q + r * a.q_stride + h * dh;
        auto slot_base = [&](int64_t pos) {
          const int64_t page = seq.block_table[pos / kv.block_size];
          return ((page * kv.block_size + pos % kv.block_size) * kv.kv_heads + g) * dh;
        };
        scores.assign(p - first + 1, 0.0);
        double max_score = -INFINITY;
        for (int64_t pp = first; pp <= p; ++pp) {
          const int64_t base = slot_base(pp);
          double dot = 0.0;
          for (int64_t d = 0; d < dh; ++d)
            dot += static_cast<double>(q[d]) * LoadKv(kv.k, kv.dtype, base + d, dh);
          scores[pp - first] = dot * a.scale;
          max_score = std::max(max_score, scores[pp - first]);
        }
        double denom = 0.0;
        for (double& sc : scores) {
          sc = std::exp(sc - max_score);
          denom += sc;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t pp = first; pp <= p; ++pp) {
          const int64_t base = slot_base(pp);
          const double w = scores[pp - first] / denom;
          for (int64_t d = 0; d < dh; ++d) acc[d] += w * LoadKv(kv.v, kv.dtype, base + d, dh);
        }
        float* out = a.out + r * a.out_stride + h * dh;
        for (int64_t d = 0; d < dh; ++d) out[d] = static_cast<float>(acc[d]);
      }
    }
  }
  return KernelStatus::kOk;
}

KernelStatus ValidateKvAppend(const KvAppendArgs& a) {
  if (KernelStatus s = ValidatePagedKv(a.kv); s != KernelStatus::kOk) return s;
  if (a.tokens < 0 || a.k == nullptr || a.v == nullptr || a.slots == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t width = a.kv.kv_heads * a.kv.head_dim;
  if (a.k_stride < width || a.v_stride < width) return KernelStatus::kInvalidArgument;
  for (int64_t t = 0; t < a.tokens; ++t) {
    if (a.slots[t] < -1 || a.slots[t] >= a.kv.num_blocks * a.kv.block_size) {
      return KernelStatus::kOutOfRange;
    }
  }
  return KernelStatus::kOk;
}

KernelStatus KvAppendRef(const KvAppendArgs& a) {
  if (KernelStatus s = ValidateKvAppend(a); s != KernelStatus::kOk) return s;
  const int64_t width = a.kv.kv_heads * a.kv.head_dim;
  for (int64_t t = 0; t < a.tokens; ++t) {
    if (a.slots[t] < 0) continue;
    if (a.kv.dtype == KvDtype::kQ8_0) {
      KvAppendQ8Token(a, t);
      continue;
    }
    for (int64_t i = 0; i < width; ++i) {
      const int64_t dst = a.slots[t] * width + i;
      if (a.kv.dtype == KvDtype::kF16) {
        static_cast<uint16_t*>(a.kv.k)[dst] = F32ToF16(a.k[t * a.k_stride + i]);
        static_cast<uint16_t*>(a.kv.v)[dst] = F32ToF16(a.v[t * a.v_stride + i]);
      } else {
        static_cast<float*>(a.kv.k)[dst] = a.k[t * a.k_stride + i];
        static_cast<float*>(a.kv.v)[dst] = a.v[t * a.v_stride + i];
      }
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
