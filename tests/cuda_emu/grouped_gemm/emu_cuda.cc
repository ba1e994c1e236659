#include "emu_cuda.h"

#include <algorithm>
#include <functional>

EmuDim threadIdx, blockIdx, blockDim, gridDim;
long long g_byte_perm_msb = 0;

namespace emu {
uint8_t* smem_base = nullptr;
size_t smem_bytes = 0;
bool copy_at_issue = false;
long long n_mma = 0, n_copies = 0, n_bar = 0, n_exit_pending = 0;
// Launch bookkeeping for emu_launch.h (here, not in a test, so every test binary shares it).
uint32_t launch_seed = 1;
unsigned last_grid_x = 0, last_grid_y = 0, last_block = 0;
size_t last_smem = 0;
long long n_ctas = 0;

namespace {
enum class Op { kNone, kMmaS8, kMmaF16, kWgmmaF16, kSyncWarp, kShfl, kBar, kDone };
struct Copy {
  void* dst;
  const void* src;
  int bytes;
};
struct Lane {
  ucontext_t ctx;
  std::vector<char> stack;
  Op op = Op::kNone;
  uint32_t a[4] = {}, b0 = 0, b1 = 0;
  int* c = nullptr;     // MmaS8 accumulators
  float* cf = nullptr;  // MmaF16 accumulators
  int wg_n = 0;         // WgmmaF16: N and the B descriptor
  uint64_t wg_desc = 0;
  uint32_t shfl_value = 0, shfl_result = 0;  // Shfl
  int shfl_kind = 0, shfl_arg = 0, shfl_width = 32;
  uint32_t member = 0xFFFFFFFFu;  // the lanes of the warp collective this lane waits in
  std::vector<Copy> open;
  std::deque<std::vector<Copy>> groups;
};
Lane lanes[kMaxThreads];
int n_threads = 0;  // of the running CTA (its blockDim.x)
ucontext_t sched;
int cur = -1;
std::function<void()> entry;
std::vector<std::pair<const uint8_t*, size_t>> globals;

void Trampoline() {
  entry();
  lanes[cur].op = Op::kDone;
  swapcontext(&lanes[cur].ctx, &sched);
}

void Block(Op op) {
  lanes[cur].op = op;
  swapcontext(&lanes[cur].ctx, &sched);
}

void DoCopies(const std::vector<Copy>& g) {
  for (const Copy& c : g) std::memcpy(c.dst, c.src, c.bytes);
}

int8_t S8(uint32_t r, int k) { return int8_t(r >> (8 * k)); }

// The lane a shfl.sync of lane t reads (kind 0 bfly, 1 idx, 2 down; width a power of two): as
// the PTX ISA defines them within each `width`-lane segment; -1 where the lane keeps its own value
// (down past the segment's end).
int ShflSource(int t, int kind, int arg, int width) {
  const int base = t & ~(width - 1), pos = t & (width - 1);
  switch (kind) {
    case 0:
      return base + ((pos ^ arg) & (width - 1));
    case 1:
      return base + (arg & (width - 1));
    default:
      return pos + arg < width ? t + arg : -1;
  }
}

// The 16 x 16 F16 A operand of a warp's mma.m16n8k16 (also each warp's slice of the register-A
// wgmma), lane = 4 g + t: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..2t+9],
// a3 = A[g+8][2t+8..] (lower k in the low 16 bits).
void UnpackF16A(const Lane* L, double (&A)[16][16]) {
  for (int t = 0; t < 32; ++t) {
    const int g = t / 4, q = t % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * q + h] = F16Value(L[t].a[0], h);
      A[g + 8][2 * q + h] = F16Value(L[t].a[1], h);
      A[g][2 * q + 8 + h] = F16Value(L[t].a[2], h);
      A[g + 8][2 * q + 8 + h] = F16Value(L[t].a[3], h);
    }
  }
}

// Completes the collective of warp w's lanes in `member` (the full warp for every op but shfl).
void RunWarpOp(int w, uint32_t member) {
  Lane* L = lanes + 32 * w;
  const int first = __builtin_ctz(member);
  const Op op = L[first].op;
  for (int t = 0; t < 32; ++t) {
    if (((member >> t) & 1) && (L[t].op != op || L[t].member != member)) {
      Fail("divergent warp collective");
    }
  }
  if (op != Op::kShfl && member != 0xFFFFFFFFu) Fail("partial mask on a non-shuffle collective");
  switch (op) {
    case Op::kSyncWarp:
      break;
    case Op::kShfl:
      for (int t = 0; t < 32; ++t) {
        if (!((member >> t) & 1)) continue;
        if (L[t].shfl_kind != L[first].shfl_kind || L[t].shfl_width != L[first].shfl_width ||
            (L[t].shfl_kind != 1 && L[t].shfl_arg != L[first].shfl_arg)) {
          Fail("shfl.sync kinds, widths or offsets differ within the collective");
        }
        if (L[t].shfl_kind == 3) {  // vote.ballot: bit u set where lane u's value is non-zero
          uint32_t bits = 0;
          for (int u = 0; u < 32; ++u) {
            if (((member >> u) & 1) && L[u].shfl_value != 0) bits |= 1u << u;
          }
          L[t].shfl_result = bits;
          continue;
        }
        const int src = ShflSource(t, L[t].shfl_kind, L[t].shfl_arg, L[t].shfl_width);
        if (src >= 0 && !((member >> src) & 1)) Fail("shfl.sync reads a lane outside its mask");
        L[t].shfl_result = src >= 0 ? L[src].shfl_value : L[t].shfl_value;
      }
      break;
    case Op::kMmaS8: {
      // mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32, lane = 4 g + t:
      //   a0 = A[g][4t..4t+3], a1 = A[g+8][4t..], a2 = A[g][16+4t..], a3 = A[g+8][16+4t..]
      //   b0 = B[4t..4t+3][g], b1 = B[16+4t..16+4t+3][g]   (lowest k in the low byte)
      //   c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
      int A[16][32], B[32][8];
      for (int t = 0; t < 32; ++t) {
        const int g = t / 4, q = t % 4;
        for (int k = 0; k < 4; ++k) {
          A[g][4 * q + k] = S8(L[t].a[0], k);
          A[g + 8][4 * q + k] = S8(L[t].a[1], k);
          A[g][16 + 4 * q + k] = S8(L[t].a[2], k);
          A[g + 8][16 + 4 * q + k] = S8(L[t].a[3], k);
          B[4 * q + k][g] = S8(L[t].b0, k);
          B[16 + 4 * q + k][g] = S8(L[t].b1, k);
        }
      }
      int D[16][8];
      for (int r = 0; r < 16; ++r) {
        for (int n = 0; n < 8; ++n) {
          int64_t acc = 0;  // C = 0 (the kernel's fresh accumulators)
          for (int k = 0; k < 32; ++k) acc += int64_t(A[r][k]) * B[k][n];
          if (acc != int32_t(acc)) Fail("s32 mma overflow");
          D[r][n] = int(acc);
        }
      }
      for (int t = 0; t < 32; ++t) {
        const int g = t / 4, q = t % 4;
        L[t].c[0] = D[g][2 * q];
        L[t].c[1] = D[g][2 * q + 1];
        L[t].c[2] = D[g + 8][2 * q];
        L[t].c[3] = D[g + 8][2 * q + 1];
      }
      ++n_mma;
      break;
    }
    case Op::kMmaF16: {
      // mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, lane = 4 g + t (lower k / column in
      // the low 16 bits):
      //   a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..]
      //   b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
      //   c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
      // The products of F16 values are exact in double; the hardware's order of accumulation is
      // unspecified, so the 16 products are summed in double and added to C with one rounding to
      // float (the test's tolerance covers any order).
      double A[16][16], B[16][8];
      float C[16][8];
      UnpackF16A(L, A);
      for (int t = 0; t < 32; ++t) {
        const int g = t / 4, q = t % 4;
        for (int h = 0; h < 2; ++h) {
          B[2 * q + h][g] = F16Value(L[t].b0, h);
          B[2 * q + 8 + h][g] = F16Value(L[t].b1, h);
        }
        C[g][2 * q] = L[t].cf[0];
        C[g][2 * q + 1] = L[t].cf[1];
        C[g + 8][2 * q] = L[t].cf[2];
        C[g + 8][2 * q + 1] = L[t].cf[3];
      }
      float D[16][8];
      for (int r = 0; r < 16; ++r) {
        for (int n = 0; n < 8; ++n) {
          double sum = 0;
          for (int k = 0; k < 16; ++k) sum += A[r][k] * B[k][n];
          D[r][n] = static_cast<float>(double(C[r][n]) + sum);
        }
      }
      for (int t = 0; t < 32; ++t) {
        const int g = t / 4, q = t % 4;
        L[t].cf[0] = D[g][2 * q];
        L[t].cf[1] = D[g][2 * q + 1];
        L[t].cf[2] = D[g + 8][2 * q];
        L[t].cf[3] = D[g + 8][2 * q + 1];
      }
      ++n_mma;
      break;
    }
    case Op::kWgmmaF16: {
      // A: the warp's 16 x 16 slice, mma.m16n8k16's A fragment; D tile j (columns 8j..8j+7):
      // cf[4j + 0..3] as mma's C fragment. B[k][n] at start + (n / 8) SBO + (k / 8) LBO +
      // (n % 8) 16 + (k % 8) 2 bytes of shared memory.
      const int n_cols = L[0].wg_n;
      const uint64_t desc = L[0].wg_desc;
      for (int t = 1; t < 32; ++t) {
        if (L[t].wg_n != n_cols || L[t].wg_desc != desc) Fail("wgmma operands differ in a warp");
      }
      if ((desc >> 49) & 7 || desc >> 62) Fail("wgmma descriptor: base offset or swizzle set");
      const uint32_t start = uint32_t(desc & 0x3FFF) << 4;
      const uint32_t lbo = uint32_t((desc >> 16) & 0x3FFF) << 4;
      const uint32_t sbo = uint32_t((desc >> 32) & 0x3FFF) << 4;
      double A[16][16];
      UnpackF16A(L, A);
      std::vector<double> B(16 * n_cols);
      for (int n = 0; n < n_cols; ++n) {
        for (int k = 0; k < 16; ++k) {
          const uint32_t off = start + (n / 8) * sbo + (k / 8) * lbo + (n % 8) * 16 + (k % 8) * 2;
          if (off + 2 > smem_bytes) Fail("wgmma B read past dynamic shared memory");
          uint16_t h;
          std::memcpy(&h, smem_base + off, 2);
          B[k * n_cols + n] = F16Value(h, 0);
        }
      }
      for (int t = 0; t < 32; ++t) {
        const int g = t / 4, q = t % 4;
        for (int j = 0; j < n_cols / 8; ++j) {
          for (int e = 0; e < 4; ++e) {
            const int r = g + 8 * (e / 2), n = 8 * j + 2 * q + (e % 2);
            double sum = 0;
            for (int k = 0; k < 16; ++k) sum += A[r][k] * B[k * n_cols + n];
            L[t].cf[4 * j + e] = static_cast<float>(double(L[t].cf[4 * j + e]) + sum);
          }
        }
      }
      ++n_mma;
      break;
    }
    default:
      Fail("not a warp op");
  }
  for (int t = 0; t < 32; ++t) {
    if ((member >> t) & 1) L[t].op = Op::kNone;
  }
}
bool IsWarpOp(Op op) {
  return op == Op::kMmaS8 || op == Op::kMmaF16 || op == Op::kWgmmaF16 || op == Op::kSyncWarp ||
         op == Op::kShfl;
}

// cp.async of `bytes` (16: .cg, 8: .ca): both addresses `bytes`-aligned, the destination inside
// the launch's dynamic shared memory, the source inside one registered global buffer.
void CopyAsync(void* smem, const void* global, int bytes) {
  const uint32_t off = SharedOffset(smem);
  if (off + bytes > smem_bytes) Fail("cp.async destination past dynamic shared memory");
  if (reinterpret_cast<uintptr_t>(smem) % bytes || reinterpret_cast<uintptr_t>(global) % bytes) {
    Fail("cp.async misaligned");
  }
  const auto* s = static_cast<const uint8_t*>(global);
  bool inside = false;
  for (const auto& [b, n] : globals) inside = inside || (s >= b && s + bytes <= b + n);
  if (!inside) Fail("cp.async source outside every global buffer");
  ++n_copies;
  if (copy_at_issue) {
    std::memcpy(smem, global, bytes);
  } else {
    lanes[cur].open.push_back({smem, global, bytes});
  }
}
}  // namespace

void Fail(const char* what) {
  std::fprintf(stderr, "EMU FAILURE: %s (block %u,%u thread %d)\n", what, blockIdx.x, blockIdx.y,
               cur);
  std::fflush(stdout);
  std::abort();
}

void ClearGlobals() { globals.clear(); }
bool check_global_loads = false;
void CheckGlobalLoad(const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (reinterpret_cast<uintptr_t>(b) % bytes != 0) Fail("misaligned global load");
  if (!check_global_loads) return;
  for (const auto& [g, n] : globals) {
    if (b >= g && b + bytes <= g + n) return;
  }
  Fail("global load outside every registered buffer");
}
void AddGlobal(const void* p, size_t bytes) {
  globals.push_back({static_cast<const uint8_t*>(p), bytes});
}
void Prefetch(const void* p) { CheckGlobalLoad(p, 1); }

uint32_t SharedOffset(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (b < smem_base || b >= smem_base + smem_bytes) Fail("address not in shared memory");
  return static_cast<uint32_t>(b - smem_base);
}

void CopyAsync16(void* smem, const void* global) { CopyAsync(smem, global, 16); }
void CopyAsync8(void* smem, const void* global) { CopyAsync(smem, global, 8); }
void Commit() {
  lanes[cur].groups.push_back(std::move(lanes[cur].open));
  lanes[cur].open.clear();
}
void WaitGroup(int n) {
  auto& gs = lanes[cur].groups;
  while (static_cast<int>(gs.size()) > n) {
    DoCopies(gs.front());
    gs.pop_front();
  }
}

namespace {
// The current lane with its A fragment stored for the warp's MMA (the shared part of the three).
Lane& LaneWithA(const uint32_t (&a)[4]) {
  Lane& l = lanes[cur];
  std::memcpy(l.a, a, sizeof(l.a));
  return l;
}
}  // namespace

void MmaS8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int (&c)[4]) {
  Lane& l = LaneWithA(a);
  l.c = c;
  l.b0 = b0;
  l.b1 = b1;
  Block(Op::kMmaS8);
}
void MmaF16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&c)[4]) {
  Lane& l = LaneWithA(a);
  l.cf = c;
  l.b0 = b0;
  l.b1 = b1;
  Block(Op::kMmaF16);
}

void WgmmaF16(int n, float* acc, const uint32_t (&a)[4], uint64_t desc) {
  Lane& l = LaneWithA(a);
  l.cf = acc;
  l.wg_n = n;
  l.wg_desc = desc;
  Block(Op::kWgmmaF16);
}

uint16_t F16Round(double x) {
  if (std::isnan(x)) return 0x7E00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double ax = std::fabs(x);
  if (ax == 0) return sign;
  if (std::isinf(ax)) return sign | 0x7C00;
  int e = 0;
  std::frexp(ax, &e);  // ax in [2^(e-1), 2^e)
  // The F16 ulp at ax: 2^(e-1-10) for normals, 2^-24 for subnormals (exponent floor -14).
  const int ulp = std::max(e - 1, -14) - 10;
  // Scaling by a power of two is exact; nearbyint rounds to nearest even (default mode).
  const double r = std::ldexp(std::nearbyint(std::ldexp(ax, -ulp)), ulp);
  if (r > 65504.0) return sign | 0x7C00;
  return sign | stepserve::F32ToF16(static_cast<float>(r));  // r is an F16 value: exact
}
float F16Value(uint32_t r, int hi) {
  return stepserve::F16ToF32(static_cast<uint16_t>(hi ? r >> 16 : r & 0xFFFFu));
}
uint32_t SubF16x2(uint32_t a, uint32_t b) {
  uint32_t d = 0;
  for (int h = 0; h < 2; ++h) {
    d |= uint32_t(F16Round(double(F16Value(a, h)) - double(F16Value(b, h)))) << (16 * h);
  }
  return d;
}
uint32_t MulF16x2(uint32_t a, uint32_t b) {
  uint32_t d = 0;
  for (int h = 0; h < 2; ++h) {
    d |= uint32_t(F16Round(double(F16Value(a, h)) * double(F16Value(b, h)))) << (16 * h);
  }
  return d;
}
// a * b + c with one rounding: the product of two F16 values is exact in double, and so is its
// sum with an F16 whenever their exponents are within ~30 of each other (every case the F16
// GEMM's decoders produce: q * scale - min with q < 16).
uint32_t FmaF16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d = 0;
  for (int h = 0; h < 2; ++h) {
    const double v = double(F16Value(a, h)) * double(F16Value(b, h)) + double(F16Value(c, h));
    d |= uint32_t(F16Round(v)) << (16 * h);
  }
  return d;
}
uint16_t F16FromF32(float x) { return F16Round(x); }

void SyncThreads() { Block(Op::kBar); }
void SyncWarp() {
  lanes[cur].member = 0xFFFFFFFFu;
  Block(Op::kSyncWarp);
}
uint32_t Shfl(uint32_t member, int kind, uint32_t v, int arg, int width) {
  Lane& l = lanes[cur];
  if (!((member >> (cur & 31)) & 1)) Fail("shfl.sync by a lane outside its mask");
  if (width < 1 || width > 32 || (width & (width - 1))) Fail("shfl.sync width");
  l.shfl_value = v;
  l.shfl_kind = kind;
  l.shfl_arg = arg;
  l.shfl_width = width;
  l.member = member;
  Block(Op::kShfl);
  return lanes[cur].shfl_result;
}

// Runs one CTA of `kernel` with `threads` threads (a multiple of 32, at most kMaxThreads) to
// completion.
void RunCta(std::function<void()> kernel, unsigned bx, unsigned by, int threads,
            uint32_t order_seed) {
  if (threads < 32 || threads > kMaxThreads || threads % 32) Fail("CTA size");
  const int n = threads, warps = threads / 32;
  n_threads = n;
  entry = std::move(kernel);
  blockIdx.x = bx;
  blockIdx.y = by;
  blockDim.x = n;
  blockDim.y = blockDim.z = 1;
  for (int t = 0; t < n; ++t) {
    Lane& l = lanes[t];
    l.stack.resize(1 << 18);
    l.op = Op::kNone;
    l.open.clear();
    l.groups.clear();
    getcontext(&l.ctx);
    l.ctx.uc_stack.ss_sp = l.stack.data();
    l.ctx.uc_stack.ss_size = l.stack.size();
    l.ctx.uc_link = nullptr;
    makecontext(&l.ctx, Trampoline, 0);
  }
  // Random picks in [0, m) as (rng * m) >> 32: for 128 threads / 4 warps the same draws as the
  // shifts used before the thread count became a launch parameter (rng >> 25, rng >> 30).
  auto pick = [](uint32_t r, int m) { return static_cast<int>((uint64_t{r} * m) >> 32); };
  uint32_t rng = order_seed * 2654435761u + 1;
  for (;;) {
    // Run every runnable lane until it blocks (in a varying order).
    bool ran = false;
    const int start = pick(rng = rng * 1664525u + 1013904223u, n);
    const bool reverse = (rng >> 7) & 1;
    for (int k = 0; k < n; ++k) {
      const int t = reverse ? (start - k + n) % n : (start + k) % n;
      if (lanes[t].op != Op::kNone) continue;
      cur = t;
      threadIdx.x = t;
      threadIdx.y = threadIdx.z = 0;
      swapcontext(&sched, &lanes[t].ctx);
      ran = true;
    }
    if (ran) continue;
    // Complete a warp collective every lane of its mask has reached (in a varying order): the
    // full warp, or for a shuffle the lanes of its mask (a lane of the mask that exited is a
    // deadlock, reported below).
    bool progressed = false;
    const int w0 = pick(rng = rng * 1664525u + 1013904223u, warps);
    for (int k = 0; k < warps && !progressed; ++k) {
      const int w = (w0 + k) % warps;
      for (int t = 0; t < 32 && !progressed; ++t) {
        const Lane& l = lanes[32 * w + t];
        if (!IsWarpOp(l.op)) continue;
        const uint32_t member = l.op == Op::kShfl ? l.member : 0xFFFFFFFFu;
        bool all = true;
        for (int u = 0; u < 32; ++u) {
          if ((member >> u) & 1) all = all && IsWarpOp(lanes[32 * w + u].op);
        }
        if (all) {
          cur = -1;
          RunWarpOp(w, member);
          progressed = true;  // let the lanes run again before the next op: more interleavings
        }
      }
    }
    if (progressed) continue;
    int done = 0, bar = 0;
    for (int t = 0; t < n; ++t) {
      done += lanes[t].op == Op::kDone;
      bar += lanes[t].op == Op::kBar;
    }
    if (done == n) break;
    if (bar > 0 && bar + done == n) {
      if (done > 0) Fail("__syncthreads with exited threads");
      for (int t = 0; t < n; ++t) lanes[t].op = Op::kNone;
      ++n_bar;
      continue;
    }
    Fail("deadlock: warp collective with lanes at a barrier or exited");
  }
  // Copies still in flight at exit land now (none should carry data the CTA needed).
  for (int t = 0; t < n; ++t) {
    for (auto& g : lanes[t].groups) {
      n_exit_pending += !g.empty();
      DoCopies(g);
    }
    n_exit_pending += !lanes[t].open.empty();
    DoCopies(lanes[t].open);
  }
}
}  // namespace emu
