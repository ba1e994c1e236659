#include "emu_cuda.h"

#include <algorithm>
#include <functional>

EmuDim threadIdx, blockIdx, blockDim;
long long g_byte_perm_msb = 0;

namespace emu {
uint8_t* smem_base = nullptr;
size_t smem_bytes = 0;
bool copy_at_issue = false;
long long n_mma = 0, n_copies = 0, n_bar = 0, n_exit_pending = 0;

namespace {
enum class Op { kNone, kMmaS8, kSyncWarp, kBar, kDone };
using Copy = std::pair<void*, const void*>;
struct Lane {
  ucontext_t ctx;
  std::vector<char> stack;
  Op op = Op::kNone;
  uint32_t a[4] = {}, b0 = 0, b1 = 0;
  int* c = nullptr;
  std::vector<Copy> open;
  std::deque<std::vector<Copy>> groups;
};
Lane lanes[kThreads];
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
  for (const auto& [d, s] : g) std::memcpy(d, s, 16);
}

int8_t S8(uint32_t r, int k) { return int8_t(r >> (8 * k)); }

void RunWarpOp(int w) {
  Lane* L = lanes + 32 * w;
  const Op op = L[0].op;
  for (int t = 0; t < 32; ++t) {
    if (L[t].op != op) Fail("divergent warp collective");
  }
  switch (op) {
    case Op::kSyncWarp:
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
    default:
      Fail("not a warp op");
  }
  for (int t = 0; t < 32; ++t) L[t].op = Op::kNone;
}
bool IsWarpOp(Op op) { return op == Op::kMmaS8 || op == Op::kSyncWarp; }
}  // namespace

void Fail(const char* what) {
  std::fprintf(stderr, "EMU FAILURE: %s (block %u,%u thread %d)\n", what, blockIdx.x, blockIdx.y,
               cur);
  std::fflush(stdout);
  std::abort();
}

void ClearGlobals() { globals.clear(); }
void AddGlobal(const void* p, size_t bytes) {
  globals.push_back({static_cast<const uint8_t*>(p), bytes});
}

uint32_t SharedOffset(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (b < smem_base || b >= smem_base + smem_bytes) Fail("address not in shared memory");
  return static_cast<uint32_t>(b - smem_base);
}

void CopyAsync16(void* smem, const void* global) {
  const uint32_t off = SharedOffset(smem);
  if (off + 16 > smem_bytes) Fail("cp.async destination past dynamic shared memory");
  if (reinterpret_cast<uintptr_t>(smem) % 16 || reinterpret_cast<uintptr_t>(global) % 16) {
    Fail("cp.async misaligned");
  }
  const auto* s = static_cast<const uint8_t*>(global);
  bool inside = false;
  for (const auto& [b, n] : globals) inside = inside || (s >= b && s + 16 <= b + n);
  if (!inside) Fail("cp.async source outside every global buffer");
  ++n_copies;
  if (copy_at_issue) {
    std::memcpy(smem, global, 16);
  } else {
    lanes[cur].open.push_back({smem, global});
  }
}
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

void MmaS8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int (&c)[4]) {
  Lane& l = lanes[cur];
  l.c = c;
  std::memcpy(l.a, a, sizeof(l.a));
  l.b0 = b0;
  l.b1 = b1;
  Block(Op::kMmaS8);
}
void SyncThreads() { Block(Op::kBar); }
void SyncWarp() { Block(Op::kSyncWarp); }

// Runs one CTA of `kernel` to completion.
void RunCta(std::function<void()> kernel, unsigned bx, unsigned by, uint32_t order_seed) {
  entry = std::move(kernel);
  blockIdx.x = bx;
  blockIdx.y = by;
  blockDim.x = kThreads;
  blockDim.y = blockDim.z = 1;
  for (int t = 0; t < kThreads; ++t) {
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
  uint32_t rng = order_seed * 2654435761u + 1;
  for (;;) {
    // Run every runnable lane until it blocks (in a varying order).
    bool ran = false;
    const int start = static_cast<int>((rng = rng * 1664525u + 1013904223u) >> 25) % kThreads;
    const bool reverse = (rng >> 7) & 1;
    for (int k = 0; k < kThreads; ++k) {
      const int t = reverse ? (start - k + kThreads) % kThreads : (start + k) % kThreads;
      if (lanes[t].op != Op::kNone) continue;
      cur = t;
      threadIdx.x = t;
      threadIdx.y = threadIdx.z = 0;
      swapcontext(&sched, &lanes[t].ctx);
      ran = true;
    }
    if (ran) continue;
    // Complete the warp collectives every lane of the warp has reached (in a varying order).
    bool progressed = false;
    const int w0 = static_cast<int>((rng = rng * 1664525u + 1013904223u) >> 30);
    for (int k = 0; k < kThreads / 32; ++k) {
      const int w = (w0 + k) % (kThreads / 32);
      bool all = true, any = false;
      for (int t = 0; t < 32; ++t) {
        const bool wop = IsWarpOp(lanes[32 * w + t].op);
        all = all && wop;
        any = any || wop;
      }
      if (all) {
        cur = -1;
        RunWarpOp(w);
        progressed = true;
        break;  // let the lanes run again before the next warp's op: more interleavings
      }
      (void)any;
    }
    if (progressed) continue;
    int done = 0, bar = 0;
    for (int t = 0; t < kThreads; ++t) {
      done += lanes[t].op == Op::kDone;
      bar += lanes[t].op == Op::kBar;
    }
    if (done == kThreads) break;
    if (bar > 0 && bar + done == kThreads) {
      if (done > 0) Fail("__syncthreads with exited threads");
      for (int t = 0; t < kThreads; ++t) lanes[t].op = Op::kNone;
      ++n_bar;
      continue;
    }
    Fail("deadlock: warp collective with lanes at a barrier or exited");
  }
  // Copies still in flight at exit land now (none should carry data the CTA needed).
  for (int t = 0; t < kThreads; ++t) {
    for (auto& g : lanes[t].groups) {
      n_exit_pending += !g.empty();
      DoCopies(g);
    }
    n_exit_pending += !lanes[t].open.empty();
    DoCopies(lanes[t].open);
  }
}
}  // namespace emu
