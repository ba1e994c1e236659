// Host side of the CUDA paged attention (paged_attention_cuda.h): flattening the batch
// description into one uploadable int32 array, the argument checks, the split-K decision and
// combine switch, the scratch and counter sizes and the tiles of the tensor-core prefill kernel.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/env_switch.h"

namespace stepserve::kernels {
namespace {

constexpr int64_t kInt32Max = 0x7FFFFFFF;
// Split-K pays off once every split still has a 32-key chunk to stream: at batch 1 the grid is
// only kv_heads CTAs (8 for Step-3.5-Flash), so even a 256-token context ran on 8 of 132
// multiprocessors (14.5 us per layer on the H200, ncu) without it. A CTA's chunks run one after
// another, each a few dependent memory round trips (page table, K / V, then the math), so one
// chunk per split is the fastest at short contexts (session 10: two chunks per split took 37 us
// per layer at 256 keys).
constexpr int64_t kSplitMinVisibleKeys = 64;
constexpr int64_t kSplitMinKeysPerSplit = 32;
// Split until there are 8 CTAs per multiprocessor: a CTA's chunks run one after another and each
// is latency-bound, so more, shorter splits win while a chunk per split is left (H200, 45 layers,
// session 10: batch 16 at 4096 keys 34.15 -> 31.16 ms per step with 8 instead of 2; batch 1 and 4
// and 256 keys unchanged within 1.5%). STEPSERVE_ATTN_CTAS_PER_SM=1..16 overrides it (read once).
int64_t TargetCtasPerSm() {
  static const int64_t target = [] {
    const char* v = std::getenv("STEPSERVE_ATTN_CTAS_PER_SM");
    const long parsed = v == nullptr ? 0 : std::strtol(v, nullptr, 10);
    return parsed >= 1 && parsed <= 16 ? static_cast<int64_t>(parsed) : int64_t{8};
  }();
  return target;
}
constexpr int64_t kHeadsPerCta = 16;  // matches the kernel's accumulator bound

// Off by default: on the H200 (45 layers, 256 keys, 8 splits) the fused combine measured
// slower than the combine kernel, whose launch PDL already overlaps - batch 1 5.82 vs 5.75 ms,
// batch 4 11.47 vs 11.39 ms, batch 16 equal (docs/cuda-engine.md).
std::atomic<bool>& FusedCombineSetting() {
  static std::atomic<bool> setting{EnvSwitchSet("STEPSERVE_ATTN_FUSED_COMBINE")};
  return setting;
}

// On by default since session 40: with it every GPU test passed (attention, step graph, prefill,
// the whole model) and decode steps were 2.7-4.0% faster at 1-64 streams (H100, 24 layers).
std::atomic<bool>& MmaDecodeSetting() {
  static std::atomic<bool> setting{EnvSwitchOn("STEPSERVE_ATTN_MMA_DECODE")};
  return setting;
}

std::atomic<int>& CtaHeadsSetting() {
  static std::atomic<int> setting{[] {
    const char* v = std::getenv("STEPSERVE_ATTN_CTA_HEADS");
    const long parsed = v == nullptr ? 0 : std::strtol(v, nullptr, 10);
    return parsed >= 1 && parsed <= kHeadsPerCta ? static_cast<int>(parsed) : 0;
  }()};
  return setting;
}

// The rule's floor: below 4 heads some of the kernel's 4 warps would have no head to score.
constexpr int64_t kMinCtaHeads = 4;

}  // namespace

int64_t PagedAttentionCudaCtaHeads(int64_t n_rows, int64_t group, int64_t kv_heads, int64_t splits,
                                   int sm_count) {
  const int64_t whole = std::clamp<int64_t>(group, 1, kHeadsPerCta);
  const int fixed = CtaHeadsSetting().load(std::memory_order_relaxed);
  if (fixed > 0) return std::min<int64_t>(whole, fixed);
  int64_t heads = whole;
  auto ctas = [&](int64_t h) { return n_rows * kv_heads * ((group + h - 1) / h) * splits; };
  while (heads > kMinCtaHeads) {
    const int64_t fewer = std::max(kMinCtaHeads, (heads + 1) / 2);
    if (ctas(fewer) > sm_count) break;  // past one wave (or no SM count): measured slower
    heads = fewer;
  }
  return heads;
}

int SetPagedAttentionCudaCtaHeads(int heads) {
  return CtaHeadsSetting().exchange(std::clamp(heads, 0, static_cast<int>(kHeadsPerCta)));
}

bool PagedAttentionCudaFusedCombine() {
  return FusedCombineSetting().load(std::memory_order_relaxed);
}

bool SetPagedAttentionCudaFusedCombine(bool enabled) {
  return FusedCombineSetting().exchange(enabled);
}

bool PagedAttentionCudaMmaDecode() { return MmaDecodeSetting().load(std::memory_order_relaxed); }

bool SetPagedAttentionCudaMmaDecode(bool enabled) { return MmaDecodeSetting().exchange(enabled); }

bool PagedAttentionCudaMmaSupports(const PagedAttentionCudaArgs& a) {
  const PagedKv& kv = a.kv;
  if (kv.dtype != KvDtype::kF32 && kv.dtype != KvDtype::kF16) return false;
  if (kv.head_dim != 128 && kv.head_dim != 192) return false;
  if (kv.kv_heads <= 0 || a.heads % kv.kv_heads != 0 || a.heads / kv.kv_heads > 16) return false;
  const auto address = [](const void* x) { return reinterpret_cast<uintptr_t>(x); };
  return address(kv.k) % 16 == 0 && address(kv.v) % 16 == 0 && address(a.q) % 16 == 0 &&
         a.q_stride % 4 == 0 && address(a.out) % 8 == 0 && a.out_stride % 2 == 0;
}

KernelStatus ValidatePagedKvCuda(const PagedKv& kv) {
  if (kv.k == nullptr || kv.v == nullptr) return KernelStatus::kInvalidArgument;
  if (kv.dtype != KvDtype::kF32 && kv.dtype != KvDtype::kF16 && kv.dtype != KvDtype::kQ8_0) {
    return KernelStatus::kUnsupportedType;
  }
  if (kv.num_blocks <= 0 || kv.block_size <= 0 || kv.kv_heads <= 0 || kv.head_dim <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

bool PagedAttentionCudaCombineGates(const PagedAttentionCudaArgs& a) {
  return a.splits > 1 && a.kv.head_dim % 32 == 0 && a.out_stride % 4 == 0 &&
         reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
}

KernelStatus ValidatePagedAttentionCudaArgs(const PagedAttentionCudaArgs& a) {
  const PagedKv& kv = a.kv;
  if (KernelStatus s = ValidatePagedKvCuda(kv); s != KernelStatus::kOk) return s;
  if (kv.head_dim > kMaxAttentionHeadDim) return KernelStatus::kTooLarge;
  // Q8_0: whole blocks per vector, and 2-byte aligned pages for the 16-bit loads.
  if (kv.dtype == KvDtype::kQ8_0 &&
      (KvVectorBytes(kv.dtype, kv.head_dim) == 0 || reinterpret_cast<uintptr_t>(kv.k) % 2 != 0 ||
       reinterpret_cast<uintptr_t>(kv.v) % 2 != 0)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.heads <= 0 || a.heads % kv.kv_heads != 0 || a.window < 0 || a.n_rows < 0) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t width = a.heads * kv.head_dim;
  if (a.q == nullptr || a.out == nullptr || a.q_stride < width || a.out_stride < width ||
      !(a.scale > 0.0f)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.n_rows > 0 && (a.rows == nullptr || a.block_tables == nullptr)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.splits < 1 || a.splits > kPagedAttentionCudaMaxSplits) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.splits > 1 && (a.scratch == nullptr || reinterpret_cast<uintptr_t>(a.scratch) % 16 != 0 ||
                       a.scratch_bytes < PagedAttentionCudaScratchBytes(a.n_rows, a.heads,
                                                                        kv.head_dim, a.splits))) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.split_arrivals != nullptr &&
      (reinterpret_cast<uintptr_t>(a.split_arrivals) % alignof(int32_t) != 0 ||
       a.split_arrival_count < PagedAttentionCudaArrivalCount(a.n_rows, a.heads, kv.kv_heads))) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.gate != nullptr) {
    if (!PagedAttentionCudaCombineGates(a) || a.gate_stride < a.heads ||
        (a.q8_natural == nullptr) != (a.q8_pair == nullptr) ||
        (a.q8_natural != nullptr && a.q8_rows < 1)) {
      return KernelStatus::kInvalidArgument;
    }
  } else if (a.q8_natural != nullptr || a.q8_pair != nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t passes = (a.heads / kv.kv_heads + kHeadsPerCta - 1) / kHeadsPerCta;
  if (a.n_rows * kv.kv_heads * passes > 0x7FFFFFFF || a.n_rows * a.heads > 0x7FFFFFFF ||
      kv.block_size > 0x7FFFFFFF || kv.kv_heads > 0x7FFFFFFF) {
    return KernelStatus::kTooLarge;
  }
  return KernelStatus::kOk;
}

KernelStatus FlattenPagedAttentionBatch(const PagedAttentionArgs& a,
                                        PagedAttentionCudaBatch* batch) {
  if (batch == nullptr) return KernelStatus::kInvalidArgument;
  if (KernelStatus s = ValidatePagedAttention(a); s != KernelStatus::kOk) return s;
  int64_t n_rows = 0;
  int64_t n_entries = 0;
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    const AttentionSeq& seq = a.seqs[s];
    if (seq.q_count == 0) continue;
    n_rows += seq.q_count;
    n_entries += (seq.context_len + a.kv.block_size - 1) / a.kv.block_size;
  }
  if (n_rows > kInt32Max || 4 * n_rows + n_entries > kInt32Max) return KernelStatus::kTooLarge;
  batch->n_rows = n_rows;
  batch->tables_offset = 4 * n_rows;
  batch->max_visible = 0;
  batch->words.assign(static_cast<size_t>(4 * n_rows + n_entries), 0);
  int32_t* row_words = batch->words.data();
  int64_t table_at = batch->tables_offset;
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    const AttentionSeq& seq = a.seqs[s];
    if (seq.q_count == 0) continue;
    if (seq.q_begin + seq.q_count > kInt32Max) return KernelStatus::kTooLarge;
    const int64_t entries = (seq.context_len + a.kv.block_size - 1) / a.kv.block_size;
    for (int64_t r = seq.q_begin; r < seq.q_begin + seq.q_count; ++r) {
      const int64_t p = a.positions[r];
      const int64_t first = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
      batch->max_visible = std::max(batch->max_visible, p - first + 1);
      row_words[0] = static_cast<int32_t>(r);
      row_words[1] = static_cast<int32_t>(p);
      // Relative to the first table entry: callers pass block_tables = words + tables_offset.
      row_words[2] = static_cast<int32_t>(table_at - batch->tables_offset);
      row_words[3] = 0;
      row_words += 4;
    }
    std::copy(seq.block_table, seq.block_table + entries, batch->words.begin() + table_at);
    table_at += entries;
  }
  return KernelStatus::kOk;
}

int64_t PagedAttentionCudaSplits(int64_t n_rows, int64_t heads, int64_t kv_heads,
                                 int64_t max_visible, int sm_count) {
  if (n_rows <= 0 || kv_heads <= 0 || heads < kv_heads || sm_count <= 0) return 1;
  if (max_visible < kSplitMinVisibleKeys) return 1;
  const int64_t group = heads / kv_heads;
  const int64_t passes = (group + kHeadsPerCta - 1) / kHeadsPerCta;
  const int64_t ctas = n_rows * kv_heads * passes;
  const int64_t target = TargetCtasPerSm() * sm_count;
  if (ctas >= target) return 1;
  int64_t splits = (target + ctas - 1) / ctas;
  splits = std::min(splits, (max_visible + kSplitMinKeysPerSplit - 1) / kSplitMinKeysPerSplit);
  splits = std::clamp<int64_t>(splits, 1, kPagedAttentionCudaMaxSplits);
  // A power of two: the count then changes only when the context doubles, and a recorded decode
  // step (CUDA graph) is re-recorded when it does.
  int64_t pow2 = 1;
  while (2 * pow2 <= splits) pow2 *= 2;
  return pow2;
}

int64_t BuildPrefillTiles(const PagedAttentionCudaBatch& batch, int64_t min_rows,
                          std::vector<PrefillTileCuda>* tiles) {
  tiles->clear();
  // Record r is words[4r .. 4r + 3] = {q_row, position, table_offset, 0} (PagedAttentionCudaRow).
  const int64_t n =
      std::clamp<int64_t>(batch.n_rows, 0, static_cast<int64_t>(batch.words.size()) / 4);
  auto position = [&](int64_t r) { return static_cast<int64_t>(batch.words[4 * r + 1]); };
  auto table = [&](int64_t r) { return batch.words[4 * r + 2]; };
  int64_t left_out = std::max<int64_t>(batch.n_rows, 0) - n;  // records past `words`, if any
  for (int64_t begin = 0; begin < n;) {
    // The run: records that continue the previous one's sequence at the next position.
    int64_t end = begin + 1;
    while (end < n && table(end) == table(begin) && position(end) == position(end - 1) + 1) ++end;
    if (end - begin < std::max<int64_t>(min_rows, 1)) {
      left_out += end - begin;
    } else {
      for (int64_t first = begin; first < end; first += kPrefillTileRows) {
        tiles->push_back({static_cast<int32_t>(first),
                          static_cast<int32_t>(std::min(kPrefillTileRows, end - first))});
      }
    }
    begin = end;
  }
  return left_out;
}

int64_t PagedAttentionCudaScratchBytes(int64_t n_rows, int64_t heads, int64_t head_dim,
                                       int64_t splits) {
  if (n_rows <= 0 || heads <= 0 || head_dim <= 0 || splits <= 1) return 0;
  // Per (row, head, split): head_dim partial outputs, then one running max and one sum.
  const int64_t partials = n_rows * heads * splits;
  return partials * (head_dim + 2) * static_cast<int64_t>(sizeof(float));
}

int64_t PagedAttentionCudaArrivalCount(int64_t n_rows, int64_t heads, int64_t kv_heads) {
  if (n_rows <= 0 || heads <= 0 || kv_heads <= 0) return 0;
  const int64_t passes = (heads / kv_heads + kHeadsPerCta - 1) / kHeadsPerCta;
  return n_rows * kv_heads * passes;  // the attention kernel's grid columns
}

}  // namespace stepserve::kernels
