// One attention case for the host emulations of the prefill and decode attention kernels
// (prefill_attention/emu_test.cc, paged_attention/emu_test.cc): shuffled pages filled through
// KvAppendRef, sequences with their query rows at the end of their contexts (a window clears the
// pages no row can see), random queries, PagedAttentionRef's output and the flattened batch the
// CUDA kernels take. Verification harness only.
#pragma once

#include <vector_types.h>  // float4

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"

namespace emu_attention {

struct SeqSpec {
  int64_t context, q_count;
};

struct Case {
  int64_t head_dim = 128, kv_heads = 1, group = 2, block_size = 16, window = 0;
  stepserve::kernels::KvDtype dtype = stepserve::kernels::KvDtype::kF32;
  std::vector<SeqSpec> seqs;
  int64_t q_pad = 0;
  float q_scale = 3.0f;
};

inline std::vector<float> RandomVector(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A built case; the pointers in `host`, `batch` and `kv` point into its own vectors, so it is not
// copied or moved once Build has run.
struct Built {
  int64_t rows = 0, heads = 0, width = 0, stride = 0;
  std::vector<float4> k_store, v_store;  // 16-byte aligned pages
  stepserve::kernels::PagedKv kv;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> positions;
  std::vector<stepserve::kernels::AttentionSeq> seqs;
  std::vector<float> q, want;
  stepserve::kernels::PagedAttentionArgs host;
  stepserve::kernels::PagedAttentionCudaBatch batch;

  Built() = default;
  Built(const Built&) = delete;
  Built& operator=(const Built&) = delete;

  // False when the reference append, the reference attention or the flattening refuses the case.
  bool Build(const Case& c, uint32_t seed) {
    namespace k = stepserve::kernels;
    std::mt19937 rng(seed);
    const int64_t dh = c.head_dim, bs = c.block_size;
    heads = c.kv_heads * c.group;
    width = heads * dh;
    stride = width + c.q_pad;
    const int64_t width_kv = c.kv_heads * dh;
    int64_t num_blocks = 3;
    for (const SeqSpec& s : c.seqs) num_blocks += (s.context + bs - 1) / bs;
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    int64_t next = 0;
    for (const SeqSpec& s : c.seqs) {
      const int64_t pages = (s.context + bs - 1) / bs;
      tables.emplace_back(ids.begin() + next, ids.begin() + next + pages);
      next += pages;
    }
    const size_t cache_bytes =
        static_cast<size_t>(num_blocks * bs * c.kv_heads * k::KvVectorBytes(c.dtype, dh));
    k_store.assign(cache_bytes / 16 + 2, float4{});
    v_store.assign(cache_bytes / 16 + 2, float4{});
    auto* k_cache = reinterpret_cast<uint8_t*>(k_store.data());
    auto* v_cache = reinterpret_cast<uint8_t*>(v_store.data());
    std::memset(k_cache, 0xFF, cache_bytes);  // NaN in the pages no sequence owns
    std::memset(v_cache, 0xFF, cache_bytes);
    kv = k::PagedKv{k_cache, v_cache, c.dtype, num_blocks, bs, c.kv_heads, dh};
    std::vector<int64_t> slots;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      for (int64_t p = 0; p < c.seqs[s].context; ++p)
        slots.push_back(tables[s][p / bs] * bs + p % bs);
    }
    const int64_t tokens = static_cast<int64_t>(slots.size());
    const std::vector<float> kv_k = RandomVector(tokens * width_kv, 1.0f, rng);
    const std::vector<float> kv_v = RandomVector(tokens * width_kv, 1.0f, rng);
    k::KvAppendArgs append;
    append.k = kv_k.data();
    append.k_stride = width_kv;
    append.v = kv_v.data();
    append.v_stride = width_kv;
    append.tokens = tokens;
    append.slots = slots.data();
    append.kv = kv;
    if (k::KvAppendRef(append) != k::KernelStatus::kOk) return false;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const SeqSpec& spec = c.seqs[s];
      k::AttentionSeq seq;
      seq.q_begin = static_cast<int64_t>(positions.size());
      seq.q_count = spec.q_count;
      seq.context_len = spec.context;
      for (int64_t p = spec.context - spec.q_count; p < spec.context; ++p)
        positions.push_back(static_cast<int32_t>(p));
      if (c.window > 0) {
        const int64_t earliest = std::max<int64_t>(0, spec.context - spec.q_count - c.window + 1);
        for (int64_t page = 0; (page + 1) * bs <= earliest; ++page) tables[s][page] = -1;
      }
      seqs.push_back(seq);
    }
    // The tables are final only now: the sequences take their pointers after the loop above.
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      seqs[s].block_table = tables[s].data();
      seqs[s].block_table_len = static_cast<int64_t>(tables[s].size());
    }
    rows = static_cast<int64_t>(positions.size());
    q = RandomVector(rows * stride, c.q_scale, rng);
    want.assign(rows * stride, 0.0f);
    host.q = q.data();
    host.q_stride = stride;
    host.out = want.data();
    host.out_stride = stride;
    host.positions = positions.data();
    host.seqs = seqs.data();
    host.n_seqs = static_cast<int64_t>(seqs.size());
    host.heads = heads;
    host.window = c.window;
    host.scale = 1.0f / std::sqrt(static_cast<float>(dh));
    host.kv = kv;
    if (k::PagedAttentionRef(host) != k::KernelStatus::kOk) return false;
    return k::FlattenPagedAttentionBatch(host, &batch) == k::KernelStatus::kOk;
  }

  // The CUDA kernels' arguments for this batch, writing to `out` (stride floats a row).
  stepserve::kernels::PagedAttentionCudaArgs CudaArgs(float* out) const {
    stepserve::kernels::PagedAttentionCudaArgs a;
    a.q = q.data();
    a.q_stride = stride;
    a.out = out;
    a.out_stride = stride;
    a.rows = reinterpret_cast<const stepserve::kernels::PagedAttentionCudaRow*>(batch.words.data());
    a.n_rows = batch.n_rows;
    a.block_tables = batch.words.data() + batch.tables_offset;
    a.heads = heads;
    a.window = host.window;
    a.scale = host.scale;
    a.kv = kv;
    return a;
  }
};

}  // namespace emu_attention
