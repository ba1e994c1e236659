// Attention over a paged KV cache for a ragged batch, spec 4.4 steps 4-6, and the KV append that
// fills the pages.
//
// Cache layout (one layer): `num_blocks` pages of `block_size` token slots; each slot holds
// `kv_heads` vectors of `head_dim` elements, K and V in separate arrays of identical layout:
//   element (page, slot, g, d) at ((page * block_size + slot) * kv_heads + g) * head_dim + d.
// A sequence's token at absolute position p lives in page block_table[p / block_size], slot
// p % block_size. Pages a query cannot see (outside its window) are never read, so their table
// entries may be anything (e.g. -1 for freed sliding-window pages).
//
// Semantics for a query row at position p of a sequence with `context_len` cached tokens:
// it sees p' with max(0, p - window + 1) <= p' <= min(p, context_len - 1) (window 0 = no window,
// i.e. causal full attention); query head i uses KV head i / (heads / kv_heads);
// s = (q . k) * scale; o = sum softmax(s)_p' v_p' (plain softmax, no sinks, no soft-cap).
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_H_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_H_

#include <cstdint>

#include "engine/base/thread_pool.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// Element type of the cache. kQ8_0: each head vector is head_dim / 32 GGUF Q8_0 blocks (34 bytes:
// an F16 scale d, then 32 int8 q; value = d * q; written and read by engine/quant's QuantizeRow /
// DequantizeRow), the vectors in the layout below with a stride of KvVectorBytes instead of
// head_dim elements; head_dim must be a multiple of 32.
enum class KvDtype : int { kF32 = 0, kF16 = 1, kQ8_0 = 2 };

inline constexpr int64_t kKvQ8BlockElems = 32;
inline constexpr int64_t kKvQ8BlockBytes = 34;

// Bytes of one cached K or V vector of head_dim elements; 0 when dtype cannot hold it.
int64_t KvVectorBytes(KvDtype dtype, int64_t head_dim);

// Largest supported head_dim (an accumulator per query head lives on the stack).
inline constexpr int64_t kMaxAttentionHeadDim = 512;

struct PagedKv {
  void* k = nullptr;  // [num_blocks][block_size][kv_heads][head_dim]
  void* v = nullptr;
  KvDtype dtype = KvDtype::kF32;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// One sequence of the ragged batch: query rows [q_begin, q_begin + q_count) of the Q/out arrays.
struct AttentionSeq {
  int64_t q_begin = 0;
  int64_t q_count = 0;
  int64_t context_len = 0;  // tokens cached for this sequence, including this step's rows
  const int32_t* block_table = nullptr;
  int64_t block_table_len = 0;  // entries; must cover context_len
};

struct PagedAttentionArgs {
  const float* q = nullptr;  // [rows][heads * head_dim], rows = sum of q_count
  int64_t q_stride = 0;      // floats between rows
  float* out = nullptr;      // [rows][heads * head_dim]
  int64_t out_stride = 0;
  const int32_t* positions = nullptr;  // per query row; must be < its sequence's context_len
  const AttentionSeq* seqs = nullptr;
  int64_t n_seqs = 0;
  int64_t heads = 0;   // multiple of kv.kv_heads
  int64_t window = 0;  // sliding window W (> 0), or 0 for full layers
  float scale = 0.0f;  // kappa = 1/sqrt(head_dim)
  PagedKv kv;
};

KernelStatus ValidatePagedAttention(const PagedAttentionArgs& args);

// Reference: gathers the visible keys densely, double-precision softmax and sums.
KernelStatus PagedAttentionRef(const PagedAttentionArgs& args);

// Optimised: one task per (query row, KV head); all query heads sharing a KV head read each key
// and value once; online softmax over page-sized key chunks (no score buffer).
KernelStatus PagedAttentionCpu(const PagedAttentionArgs& args, ThreadPool* pool);

// Writes K and V rows ([tokens][kv_heads * head_dim], own strides) into cache slots:
// slots[t] = page * block_size + slot (-1 skips the token).
struct KvAppendArgs {
  const float* k = nullptr;
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  int64_t tokens = 0;
  const int64_t* slots = nullptr;
  PagedKv kv;
};

KernelStatus ValidateKvAppend(const KvAppendArgs& args);
// Quantizes token t's K and V rows (Q8_0 per head vector) into a kQ8_0 cache; args valid. Shared
// by the reference and the CPU append.
void KvAppendQ8Token(const KvAppendArgs& args, int64_t t);
KernelStatus KvAppendRef(const KvAppendArgs& args);
KernelStatus KvAppendCpu(const KvAppendArgs& args, ThreadPool* pool);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_H_
