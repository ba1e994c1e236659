// Pieces both emulation tests (test.cc: the int8 grouped GEMM, test_f16.cc: the F16 one) share:
// host stand-ins for the runtime calls the launchers make, the IQ4_NL table, the pair order of
// the activations, and the random grouping of groups into slots. Include after emu_cuda.h and
// before the kernel source.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"

// Host stand-ins for the runtime calls the launchers make.
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

inline constexpr int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

// The table as the kernels take it (GemvParams::iq4nl): entry k = byte k % 4 of word k / 4.
inline void PackIq4nlTable(uint32_t (&t)[4]) {
  for (int k = 0; k < 4; ++k) {
    uint32_t v = 0;
    for (int j = 0; j < 4; ++j) v |= uint32_t(uint8_t(kValues[4 * k + j])) << (8 * j);
    t[k] = v;
  }
}

// Where element e (0..31) of a 32-value block sits in the pair-ordered activations (an
// independent copy of the rule at Q8ScratchPosition, matmul_cuda.h: element 4i + j at 8i + 2j,
// 16 + 4i + j at 8i + 2j + 1).
inline int PairPos(int e) {
  const int i = (e % 16) / 4, j = e % 4;
  return e < 16 ? 8 * i + 2 * j : 8 * i + 2 * j + 1;
}

struct SlotSpec {
  int32_t matrix;  // expert id, -1, or kSlotUnused
  int groups;
};

// A grouped kernel's case: `experts` matrices of out x in, the slots' specs, y rows of out + y_pad.
struct GroupedCase {
  std::string name;
  int64_t in, out;
  int div;
  int64_t y_pad;  // y_stride = out + y_pad
  int experts;
  std::vector<SlotSpec> slots;
  int extra_groups;  // groups in no slot (their y rows must stay NaN)
};

// The slots' groups: a random permutation of 0 .. total + extra_groups - 1, the first `total`
// given to the slots in order (the rest belong to no slot: their y rows must stay untouched).
struct Grouping {
  int total = 0, groups = 0;  // groups in slots; all groups (activation rows: groups / div)
  std::vector<int32_t> group_order, slot_matrix, slot_begin;
};
inline Grouping MakeGrouping(const std::vector<SlotSpec>& slots, int extra_groups,
                             std::mt19937& rng) {
  Grouping r;
  for (const SlotSpec& s : slots) r.total += s.groups;
  r.groups = r.total + extra_groups;
  std::vector<int32_t> perm(r.groups);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  r.group_order.assign(perm.begin(), perm.begin() + r.total);
  int at = 0;
  for (const SlotSpec& s : slots) {
    r.slot_matrix.push_back(s.matrix);
    r.slot_begin.push_back(at);
    at += s.groups;
  }
  r.slot_begin.push_back(at);
  return r;
}

// Random block-quantized matrices (IQ4_XS: 136-byte blocks, Q4_K: 144, Q6_K: 210): `experts` x
// `out` rows of `in` weights, rows padded to `row_align` bytes (16 as on the device; Q6_K also 2,
// unpadded), every byte random (the padding too) from `offset` bytes into a 16-byte-aligned
// buffer that ends at the 16-byte boundary after the last matrix byte, so a read past it is
// caught; the caller sets each block's scales.
struct QuantMatrices {
  int64_t block_bytes, nb, row_bytes, matrix_bytes, bytes, offset;
  std::vector<uint4> store;
  QuantMatrices(int experts, int64_t out, int64_t in, int64_t block_bytes_, std::mt19937& rng,
                int64_t row_align = 16, int64_t offset_ = 0)
      : block_bytes(block_bytes_),
        nb(in / 256),
        row_bytes((block_bytes * nb + row_align - 1) / row_align * row_align),
        matrix_bytes(out * row_bytes),
        bytes(experts * matrix_bytes),
        offset(offset_),
        store((offset + bytes + 15) / 16) {
    for (int64_t i = 0; i < bytes; ++i) data()[i] = uint8_t(rng());
  }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(store.data()) + offset; }
  // The 16-byte segments holding matrix bytes: all a 16-byte cp.async of them may read.
  const uint8_t* segments() { return reinterpret_cast<const uint8_t*>(store.data()); }
  size_t segment_bytes() const { return (offset + bytes + 15) / 16 * 16; }
  uint8_t* block(int e, int64_t o, int64_t b) {
    return data() + e * matrix_bytes + o * row_bytes + block_bytes * b;
  }
  // Every block's F16 at byte `offset` (d: 0; Q4_K's dmin: 2) from next(), in matrix, row, block
  // order.
  template <class Next>
  void SetScales(int experts, int64_t out, Next next, int offset = 0) {
    for (int e = 0; e < experts; ++e)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t b = 0; b < nb; ++b) {
          const uint16_t h = stepserve::F32ToF16(next());
          std::memcpy(block(e, o, b) + offset, &h, 2);
        }
  }
};

// One IQ4_XS weight row (nb blocks of 136 bytes) against logical-order int8 activations xl with
// per-32 scales xd[].x: the exact dot in double, the sum of its per-sub-block terms' magnitudes
// (the scale a cancelling sum is checked against), and an F32 model accumulating one term per
// sub-block in order, as a kernel whose K loop is not split would (no FMA).
struct Iq4XsDot {
  double acc = 0, abs_acc = 0;
  float acc32 = 0.f;
};
inline Iq4XsDot DotIq4XsRow(const uint8_t* row, int64_t nb, const int8_t* xl, const float2* xd) {
  Iq4XsDot r;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + 136 * b;
    uint16_t dh, sh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&sh, blk + 2, 2);
    const double d = stepserve::F16ToF32(dh);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((blk[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
      const double dl = d * (ls - 32);
      long long isum = 0;
      for (int j = 0; j < 32; ++j) {
        const uint8_t q = blk[8 + 16 * ib + (j % 16)];
        const int nib = j < 16 ? (q & 15) : (q >> 4);
        isum += kValues[nib] * xl[256 * b + 32 * ib + j];
      }
      const double term = dl * double(xd[8 * b + ib].x) * double(isum);
      r.acc += term;
      const float dl32 = float(stepserve::F16ToF32(dh)) * float(ls - 32);
      r.acc32 += float(isum) * (dl32 * xd[8 * b + ib].x);
      r.abs_acc += std::fabs(term);
    }
  }
  return r;
}

// Random int8 activations (logical order in xl, pair order in xq for the kernels) and their
// per-32 (d, d * sum) scales: rows x in values.
struct Q8Activations {
  std::vector<int8_t> xl;
  std::vector<uint4> xq_store;
  std::vector<float2> xd;
  int8_t* xq() { return reinterpret_cast<int8_t*>(xq_store.data()); }
  Q8Activations(int64_t rows, int64_t in, bool pair_order, std::mt19937& rng)
      : xl(rows * in), xq_store((rows * in + 15) / 16), xd(rows * (in / 32)) {
    for (auto& v : xl) v = int8_t(rng());
    const int64_t blocks32 = in / 32;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < blocks32; ++b)
        for (int e = 0; e < 32; ++e)
          xq()[r * in + 32 * b + (pair_order ? PairPos(e) : e)] = xl[r * in + 32 * b + e];
    std::uniform_real_distribution<float> xdd(0.005f, 0.05f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < blocks32; ++b) {
        int s = 0;
        for (int e = 0; e < 32; ++e) s += xl[r * in + 32 * b + e];
        const float d = xdd(rng);
        xd[r * blocks32 + b] = make_float2(d, d * s);
      }
  }
};

// The weight, output and table fields every GEMV's GemvParams takes (a template: the type comes
// with the kernel source, included after this header).
template <class Params>
void SetMatrixParams(QuantMatrices& w, int64_t in, int64_t out, bool pair_order, float* y,
                     int64_t y_stride, Params* p) {
  p->w = w.data();
  p->w_row_bytes = w.row_bytes;
  p->in = in;
  p->out = out;
  p->x_pair_order = pair_order;
  p->y = y;
  p->y_stride = y_stride;
  PackIq4nlTable(p->iq4nl);
}

// Those and the grouping fields of the grouped kernels (pair-ordered activations).
template <class Params>
void SetGroupedParams(QuantMatrices& w, int64_t in, int64_t out, int experts, int div,
                      const Grouping& g, float* y, int64_t y_stride, Params* p) {
  SetMatrixParams(w, in, out, /*pair_order=*/true, y, y_stride, p);
  p->w_matrix_bytes = w.matrix_bytes;
  p->n_matrices = experts;
  p->x_group_div = div;
  p->slot_matrix = g.slot_matrix.data();
  p->slot_begin = g.slot_begin.data();
  p->group_order = g.group_order.data();
}

// The indexed (MoE expert) fields over the `experts` matrices of `w`: ids[g] picks group g's
// matrix, x holds the activation rows (the fused MoE decode kernels, test_moe_*.cc).
template <class Params>
void SetIndexedParams(QuantMatrices& w, int64_t in, int64_t out, int experts, const int32_t* ids,
                      bool pair_order, Q8Activations& x, int64_t y_stride, Params* p) {
  SetMatrixParams(w, in, out, pair_order, nullptr, y_stride, p);
  p->w_matrix_bytes = w.matrix_bytes;
  p->n_matrices = experts;
  p->matrix_ids = ids;
  p->xq = x.xq();
  p->xd = x.xd.data();
}

// A plain (not grouped) GEMV over matrix 0 of `w` with `rows` activation rows `x`: the fields and
// the emulator's global buffers (weights, activations, scales).
template <class Params>
void SetPlainParams(QuantMatrices& w, int64_t in, int64_t out, int rows, bool pair_order,
                    Q8Activations& x, float* y, int64_t y_stride, Params* p) {
  SetMatrixParams(w, in, out, pair_order, y, y_stride, p);
  p->rows = rows;
  p->xq = x.xq();
  p->xd = x.xd.data();
  emu::ClearGlobals();
  emu::AddGlobal(w.segments(), w.segment_bytes());
  emu::AddGlobal(x.xq(), rows * in);
  emu::AddGlobal(x.xd.data(), x.xd.size() * sizeof(float2));
}

// y against a double reference `want` (NaN: y must stay NaN there) with `scale` = the sum of the
// terms' magnitudes (0: the row must be exactly zero, an out-of-range slot's): 1e-4 relative, or
// for a sum that cancels to below 1e-3 of its terms, 1e-6 of the terms' sum.
struct YCheck {
  double max_rel = 0;
  int64_t bad = 0, stray = 0, missing = 0, checked = 0, zeros = 0;
  bool ok() const { return bad == 0 && stray == 0 && missing == 0; }
};
inline YCheck CheckY(const std::vector<float>& y, const std::vector<double>& want,
                     const std::vector<double>& scale) {
  YCheck r;
  for (size_t i = 0; i < y.size(); ++i) {
    if (std::isnan(want[i])) {
      r.stray += !std::isnan(y[i]);
      continue;
    }
    if (std::isnan(y[i])) {
      ++r.missing;
      continue;
    }
    if (scale[i] == 0) {
      r.bad += y[i] != 0.0f;
      ++r.zeros;
      continue;
    }
    const double err_abs = std::fabs(double(y[i]) - want[i]);
    const double rel = err_abs / std::max(std::fabs(want[i]), 1e-300);
    r.max_rel = std::max(r.max_rel, std::min(rel, err_abs / scale[i] * 100));
    r.bad += !(rel <= 1e-4 || err_abs / scale[i] <= 1e-6);
    ++r.checked;
  }
  return r;
}

// Runs case i (or only case `only`, when >= 0) with seed * 100 + i, then prints the totals of
// the emulator's counters after `label`; returns the failures (plus `fails` so far).
template <class CaseT, class RunFn>
int RunCases(const std::vector<CaseT>& cases, int only, uint32_t seed, const char* label, int fails,
             RunFn run_case) {
  for (size_t i = 0; i < cases.size(); ++i) {
    if (only >= 0 && int(i) != only) continue;
    fails += !run_case(cases[i], seed * 100 + uint32_t(i));
  }
  std::printf(
      "%d failures (%scopy_at_issue %d seed %u) ctas %lld mma %lld copies %lld barriers %lld "
      "exit-pending-groups %lld\n",
      fails, label, int(emu::copy_at_issue), seed, emu::n_ctas, emu::n_mma, emu::n_copies,
      emu::n_bar, emu::n_exit_pending);
  return fails;
}

// 240 KB of emulated shared memory (more than any launch asks; the launch narrows the limit).
inline void SetUpSharedMemory() {
  static std::vector<uint4> smem(240 * 1024 / 16);
  emu::smem_base = reinterpret_cast<uint8_t*>(smem.data());
  emu::smem_bytes = smem.size() * 16;
}

// The harnesses' command line, `[copy_at_issue 0|1] [seed] [only_case]`: sets the cp.async
// landing mode, the launch order seed and the shared memory; returns the seed and the case.
struct EmuArgs {
  uint32_t seed;
  int only;  // -1: every case
};
inline EmuArgs SetUpEmulation(int argc, char** argv) {
  emu::copy_at_issue = argc > 1 && argv[1][0] == '1';
  const EmuArgs a{argc > 2 ? uint32_t(std::atoi(argv[2])) : 1u, argc > 3 ? std::atoi(argv[3]) : -1};
  emu::launch_seed = a.seed * 1000 + 1;
  SetUpSharedMemory();
  return a;
}
