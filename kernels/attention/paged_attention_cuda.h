// Paged attention and KV append on a CUDA device: the semantics and cache layout of
// kernels/attention/paged_attention.h, with the cache, Q, K, V and outputs in device memory and
// the work enqueued on `stream` (asynchronous: faults inside a kernel surface at the next
// synchronization).
//
// The batch description (positions, sequences, block tables) lives on the host. The caller
// flattens it with FlattenPagedAttentionBatch (which validates it exactly as the CPU does:
// ValidatePagedAttention only reads the host-side batch), uploads `words` in one copy and points
// PagedAttentionCudaArgs at that device copy.
//
// Attention kernel: one CTA per (query row, KV head[, head pass][, split]) handles all query heads
// of the GQA group (up to 16 per CTA; larger groups take several passes), so every K and V element
// is read from memory once per row. Keys are processed in chunks of 32 positions gathered through
// the block table (a chunk may span pages); K and V are converted to F32 in shared memory (F16
// and Q8_0 pages dequantized in registers on the way, Q8_0 as the F32 product scale * int8); the
// softmax is computed online (running max and sum per head, rescaled per chunk) with F32
// accumulation. Prefill rows use the same kernel, each query row on its own with its causal and
// window limits, unless the caller takes the tensor-core prefill kernel below
// (PrefillAttentionCuda: tiles of up to 64 consecutive query rows of one sequence per CTA and query
// head). Split-K ("flash-decoding"): when few CTAs would run over long contexts, each row's visible
// keys are cut into `splits` ranges whose partial (max, sum, unnormalised output) are combined
// either by a second kernel (the default) or by the last CTA of each (row, KV head) to finish,
// counted by an atomic per CTA column in `split_arrivals` (one launch per call);
// PagedAttentionCudaSplits picks the split count.
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_H_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// One query row of the flattened batch (four int32 words in PagedAttentionCudaBatch::words).
struct PagedAttentionCudaRow {
  int32_t q_row = 0;         // row of Q / out
  int32_t position = 0;      // absolute position of the query
  int32_t table_offset = 0;  // its sequence's table: block_tables + table_offset
  int32_t reserved = 0;
};
static_assert(sizeof(PagedAttentionCudaRow) == 16);

// The host-side batch flattened for one upload: `n_rows` PagedAttentionCudaRow records followed
// by the sequences' block tables (each cut to the entries its context uses), all int32.
struct PagedAttentionCudaBatch {
  std::vector<int32_t> words;
  int64_t n_rows = 0;
  int64_t tables_offset = 0;  // index in `words` of the first block-table entry
  int64_t max_visible = 0;    // most keys any row sees (decides split-K)
};

// Validates `host_args` (q, out and kv pointers are only checked for null; positions, seqs and
// block tables are read) and flattens the batch. kTooLarge when a count does not fit int32.
KernelStatus FlattenPagedAttentionBatch(const PagedAttentionArgs& host_args,
                                        PagedAttentionCudaBatch* batch);

struct PagedAttentionCudaArgs {
  const float* q = nullptr;  // device, [rows][heads * head_dim]
  int64_t q_stride = 0;
  float* out = nullptr;  // device, [rows][heads * head_dim]
  int64_t out_stride = 0;
  const PagedAttentionCudaRow* rows = nullptr;  // device, n_rows records
  int64_t n_rows = 0;
  const int32_t* block_tables = nullptr;  // device, concatenated tables
  int64_t heads = 0;                      // multiple of kv.kv_heads
  int64_t window = 0;                     // 0 = full causal attention
  float scale = 0.0f;
  PagedKv kv;  // device pages
  // Split-K: 1 = single pass; > 1 needs `scratch` (device, 16-byte aligned) of at least
  // PagedAttentionCudaScratchBytes(n_rows, heads, head_dim, splits) bytes.
  int64_t splits = 1;
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
  // Split-K arrival counters (device, at least PagedAttentionCudaArrivalCount(n_rows, heads,
  // kv.kv_heads) of them): they must be zero before the first launch, and every launch leaves
  // them zero again (the combining CTA resets its counter), so one zeroing at allocation serves
  // every later launch, graph replays included. With counters and PagedAttentionCudaFusedCombine()
  // on, the combine runs inside the attention kernel; nullptr (or the switch off): a second
  // kernel combines. Launches sharing counters must be ordered (one stream).
  int32_t* split_arrivals = nullptr;
  int64_t split_arrival_count = 0;
  // Multiprocessors of the device (0: unknown): with few (row, KV head, split) CTAs the query heads
  // of a GQA group are spread over more CTAs (PagedAttentionCudaCtaHeads).
  int sm_count = 0;
  // The head gate in the split-K combine (optional; only where PagedAttentionCudaCombineGates
  // holds): out[r][h * head_dim + d] *= sigmoid(gate[r * gate_stride + h]) for each record's
  // query row r, and with q8_natural / q8_pair set the gated rows also as the GEMV's int8
  // activations (the fused-quantization areas of q8_quantize.cuh's MakeQ8Rows, q8_rows rows of
  // heads * head_dim values). The same floats and bytes as HeadGateQ8Cuda after a launch without
  // it, one kernel fewer. The combine kernel runs even with split_arrivals set.
  const float* gate = nullptr;
  int64_t gate_stride = 0;
  void* q8_natural = nullptr;
  void* q8_pair = nullptr;
  int64_t q8_rows = 0;
  // F32 math only (the backend's exact mode): never the tensor-core form, whose F16 rounding of
  // Q, K, P and V can flip a near-tied MoE routing choice in a whole model (model_cuda_test at 533
  // tokens: 2 of 533 logits rows off by 0.17 with STEPSERVE_ATTN_MMA_DECODE=1, session 38).
  bool f32_math_only = false;
};

// Whether a launch with these arguments can take the head gate into its combine: split-K, whole
// int8 blocks per head (head_dim % 32 == 0) and 16-byte aligned output rows.
bool PagedAttentionCudaCombineGates(const PagedAttentionCudaArgs& a);

inline constexpr int64_t kPagedAttentionCudaMaxSplits = 64;

// Split count for a batch: 1 unless the longest visible context is long and the grid of
// (row, KV head) CTAs would leave most of the `sm_count` multiprocessors idle.
int64_t PagedAttentionCudaSplits(int64_t n_rows, int64_t heads, int64_t kv_heads,
                                 int64_t max_visible, int sm_count);

int64_t PagedAttentionCudaScratchBytes(int64_t n_rows, int64_t heads, int64_t head_dim,
                                       int64_t splits);

// Arrival counters a split-K launch uses: one per (row, KV head, pass of up to 16 query heads).
int64_t PagedAttentionCudaArrivalCount(int64_t n_rows, int64_t heads, int64_t kv_heads);

// The split-K combine inside the attention kernel (needs PagedAttentionCudaArgs::split_arrivals)
// is off by default (it measured slower on the H200: docs/cuda-engine.md);
// STEPSERVE_ATTN_FUSED_COMBINE=1 in the environment (read at the first use) turns it on.
// SetPagedAttentionCudaFusedCombine overrides it for every later launch (tests, A/B runs; a
// recorded CUDA graph keeps the path it was recorded with) and returns the previous setting.
bool PagedAttentionCudaFusedCombine();
bool SetPagedAttentionCudaFusedCombine(bool enabled);

// Query heads per CTA of the decode kernel (the combine-kernel path; the fused combine keeps up to
// 16): the whole GQA group up to 16, halved (down to 4) while the (row, KV head, split) CTAs then
// still fit in one wave of `sm_count` multiprocessors - at batch 1 of Step-3.5-Flash 8 KV heads x
// 8 splits: 64 CTAs of 8 heads become 128 of 4 (full layers), groups of 12 (SWA layers) 128 CTAs
// of 6. Measured on the H200 (45 layers, 256 keys; session 17, bench/gpu/results-h200-v16.txt):
// batch 1 4.838 / 4.850 ms -> 4.809 / 4.798 with 4 heads everywhere; halving past one wave lost
// (batch 2 6.693 / 6.737 -> 6.786 / 6.777 ms). Every head does the same arithmetic in the same
// order whichever CTA takes it: the same bits. STEPSERVE_ATTN_CTA_HEADS=N (1-16; read once) or
// SetPagedAttentionCudaCtaHeads(N) fixes it at min(group, N); 0 restores the rule. Set returns
// the previous setting.
int64_t PagedAttentionCudaCtaHeads(int64_t n_rows, int64_t group, int64_t kv_heads, int64_t splits,
                                   int sm_count);
int SetPagedAttentionCudaCtaHeads(int heads);

// Combine-kernel launches PagedAttentionCuda has enqueued in this process (tests check the path).
int64_t PagedAttentionCudaCombineLaunches();

// The decode attention on tensor cores (paged_attention_cuda_mma.cuh: the group's query heads as
// the rows of mma.m16n8k16, K and V read from the cache straight into registers, the warps
// splitting the head dims): the same key ranges, split-K partials and combine as the scalar
// kernel, with Q, K, P and V rounded to F16 (relative output errors of order 1e-3, as the prefill
// kernel). Taken where PagedAttentionCudaMmaSupports holds, the split-K combine is not fused and
// the launch allows F16 math (!f32_math_only). On by default (session 40: every GPU test passed
// with it; decode steps 2.7-4.0% faster at 1-64 streams with an F32 cache, 3.8-5.6% with F16 than
// the scalar kernel with F32, H100; docs/cuda-engine.md): STEPSERVE_ATTN_MMA_DECODE=0 in the
// environment (read at the first use) turns it off, SetPagedAttentionCudaMmaDecode overrides it
// for every later launch and returns the previous setting.
bool PagedAttentionCudaMmaDecode();
bool SetPagedAttentionCudaMmaDecode(bool enabled);
// F32 or F16 pages 16-byte aligned, head_dim 128 or 192, at most 16 query heads per KV head, Q
// rows 16-byte aligned (q and q_stride) and output rows 8-byte aligned.
bool PagedAttentionCudaMmaSupports(const PagedAttentionCudaArgs& a);
// Launches of the tensor-core decode kernel in this process (tests check the path).
int64_t PagedAttentionCudaMmaLaunches();

// The cache checks every kernel here starts with: pointers, an F32 / F16 / Q8_0 element type
// (kUnsupportedType otherwise), positive geometry.
KernelStatus ValidatePagedKvCuda(const PagedKv& kv);

// The host-side checks of PagedAttentionCuda (sizes, pointers, alignment; nothing is dereferenced),
// shared with PrefillAttentionCuda.
KernelStatus ValidatePagedAttentionCudaArgs(const PagedAttentionCudaArgs& args);

// Checks sizes and pointers (host-side only; nothing is dereferenced), then enqueues the kernels.
// Pages outside the cache read as zeros instead of faulting (validation on the host excludes them).
// kInvalidArgument also when a launch fails (the CUDA error is cleared).
KernelStatus PagedAttentionCuda(const PagedAttentionCudaArgs& args, cudaStream_t stream);

// ---- Tensor-core prefill attention (prefill_attention_cuda.cu) ----
//
// A CTA (4 warps) computes one query head for a tile of up to kPrefillTileRows query rows of one
// sequence, flash-attention style: Q (scaled, F16) stays in registers as MMA fragments, K and V
// are gathered through the block table 64 positions at a time into shared memory as F16 (F32 and
// Q8_0 pages converted on the way, the Q8_0 values being the F32 products scale * int8 rounded to
// F16), S = Q K^T and O += P V run on mma.sync m16n8k16 (F16 inputs, F32 accumulation) with the
// online softmax in registers. Same semantics as PagedAttentionCuda; the F16 rounding of Q, K, P
// and V gives relative output errors of order 1e-3 instead of 1e-6 (and cache values beyond the
// F16 range, |x| > 65504, would become infinite).

// Largest tile: 4 warps of 16 MMA rows.
inline constexpr int64_t kPrefillTileRows = 64;

// A tile: records [first_record, first_record + count) of the flattened batch (indices into
// PagedAttentionCudaArgs::rows), 1 <= count <= kPrefillTileRows. The kernel requires what
// BuildPrefillTiles guarantees: the records belong to one sequence (equal table_offset) and their
// positions are consecutive and ascending (first, first + 1, ...). It reads the key range
// [first position - window + 1 (at least 0), last position] once for the whole tile.
struct PrefillTileCuda {
  int32_t first_record = 0;
  int32_t count = 0;
};
static_assert(sizeof(PrefillTileCuda) == 8);

// Cuts the batch's records into tiles: maximal runs of consecutive records with equal table_offset
// and positions increasing by one, each cut into tiles of kPrefillTileRows from its start (the
// last one shorter). Runs of fewer than `min_rows` records (decode rows, short chunks) are left
// out; returns how many records were left out (0: `tiles` covers the whole batch). `tiles` is
// overwritten.
int64_t BuildPrefillTiles(const PagedAttentionCudaBatch& batch, int64_t min_rows,
                          std::vector<PrefillTileCuda>* tiles);

// Whether the prefill kernel handles these pages: head_dim 128 or 192 (the kernel is compiled
// for those), F32 / F16 pages 16-byte aligned (vector copies), Q8_0 pages 2-byte aligned.
bool PrefillAttentionCudaSupports(const PagedKv& kv);

// On by default (measured on the H200, docs/cuda-engine.md): STEPSERVE_PREFILL_ATTENTION=0 in the
// environment (read at the first use) turns the backend's use of PrefillAttentionCuda off;
// SetPrefillAttentionCuda overrides it for every later call (tests, A/B runs) and returns the
// previous setting.
bool PrefillAttentionCudaEnabled();
bool SetPrefillAttentionCuda(bool enabled);

// Enqueues the prefill kernel for `n_tiles` tiles (`device_tiles`: device memory) over the batch
// of `args` (validated as PagedAttentionCuda validates it; splits and scratch are ignored). Only
// the rows of the tiles are written. kUnsupportedType when !PrefillAttentionCudaSupports(args.kv)
// (the caller then runs PagedAttentionCuda); kInvalidArgument for a bad tile list or a failed
// launch. Tiles that are out of range or empty are skipped by the kernel (their rows untouched).
// With args.gate set (gate_stride >= heads, no q8 outputs) each written row also takes the head
// gate, the same floats as HeadGateCuda after an ungated launch.
KernelStatus PrefillAttentionCuda(const PagedAttentionCudaArgs& args,
                                  const PrefillTileCuda* device_tiles, int64_t n_tiles,
                                  cudaStream_t stream);

// Kernel launches PrefillAttentionCuda has enqueued in this process (tests check the routing).
int64_t PrefillAttentionCudaLaunches();

// KV append: every pointer of `args` (k, v, slots, kv pages) is device memory. The slot values
// cannot be range-checked here: run ValidateKvAppend on the host copy of the slots before
// uploading them (the CUDA backend does); the kernel skips slots outside the cache rather than
// writing out of bounds. F16 caches round to nearest even, as F32ToF16. Q8_0 caches (pages 2-byte
// aligned) quantize each 32-value block with the operations of engine/quant's Q8_0 quantizer, so
// the bytes equal KvAppendCpu's for the same inputs.
KernelStatus KvAppendCuda(const KvAppendArgs& args, cudaStream_t stream);
// KvAppendCuda's host-side checks (pointers set, strides, the cache's geometry and alignment).
KernelStatus ValidateKvAppendCuda(const KvAppendArgs& args);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_H_
