#include "emu_cuda.h"

#include <algorithm>
#include <functional>
#include <random>

EmuDim threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
uint8_t* smem_base = nullptr;
size_t smem_bytes = 0;
bool copy_at_issue = false;
int threads = 128;
uint32_t order_seed = 1;
bool shuffle_ctas = false;
int64_t ctas = 0;

namespace {
enum class Op { kNone, kShfl, kShflIdx, kMin, kMax, kLdm, kLdmT, kMma, kWarpSync, kBar, kDone };
struct Lane {
  ucontext_t ctx;
  std::vector<char> stack;
  Op op = Op::kNone;
  // operands / results
  float f = 0;
  int i = 0;
  uint32_t addr = 0;
  uint32_t* regs = nullptr;
  float* c = nullptr;
  uint32_t a[4] = {}, b0 = 0, b1 = 0;
  // cp.async
  std::vector<std::pair<void*, const void*>> open;
  std::deque<std::vector<std::pair<void*, const void*>>> groups;
};
Lane lanes[kMaxThreads];
ucontext_t sched;
int cur = -1;
std::function<void()> entry;

void Trampoline() {
  entry();
  lanes[cur].op = Op::kDone;
  swapcontext(&lanes[cur].ctx, &sched);
}

void Block(Op op) {
  lanes[cur].op = op;
  swapcontext(&lanes[cur].ctx, &sched);
}

void DoCopies(const std::vector<std::pair<void*, const void*>>& g) {
  for (const auto& [d, s] : g) std::memcpy(d, s, 16);
}

uint16_t HalfAt(uint32_t addr) {
  if (addr + 2 > smem_bytes) Fail("ldmatrix out of shared memory");
  uint16_t h;
  std::memcpy(&h, smem_base + addr, 2);
  return h;
}

uint32_t Pack(uint16_t lo, uint16_t hi) { return lo | (uint32_t(hi) << 16); }
float H(uint32_t r, int hi) { return stepserve::F16ToF32(uint16_t(hi ? r >> 16 : r & 0xFFFF)); }

void RunWarpOp(int w) {
  Lane* L = lanes + 32 * w;
  const Op op = L[0].op;
  for (int t = 0; t < 32; ++t) {
    if (L[t].op != op) Fail("divergent warp collective");
  }
  switch (op) {
    case Op::kShfl: {
      float v[32];
      for (int t = 0; t < 32; ++t) v[t] = L[t].f;
      for (int t = 0; t < 32; ++t) L[t].f = v[t ^ L[t].i];
      break;
    }
    case Op::kShflIdx: {
      float v[32];
      for (int t = 0; t < 32; ++t) v[t] = L[t].f;
      for (int t = 0; t < 32; ++t) L[t].f = v[L[t].i & 31];
      break;
    }
    case Op::kMin:
    case Op::kMax: {
      int r = L[0].i;
      for (int t = 1; t < 32; ++t) r = op == Op::kMin ? std::min(r, L[t].i) : std::max(r, L[t].i);
      for (int t = 0; t < 32; ++t) L[t].i = r;
      break;
    }
    case Op::kLdm:
    case Op::kLdmT: {
      for (int t = 0; t < 32; ++t) {
        if (L[t].addr % 16 != 0) Fail("ldmatrix row address not 16-byte aligned");
      }
      for (int t = 0; t < 32; ++t) {
        const int gid = t / 4, tig = t % 4;
        for (int m = 0; m < 4; ++m) {
          // Matrix m: rows given by lanes 8m..8m+7, 8 halves each.
          auto at = [&](int row, int col) { return HalfAt(L[8 * m + row].addr + 2 * col); };
          L[t].regs[m] = op == Op::kLdm ? Pack(at(gid, 2 * tig), at(gid, 2 * tig + 1))
                                        : Pack(at(2 * tig, gid), at(2 * tig + 1, gid));
        }
      }
      break;
    }
    case Op::kMma: {
      float A[16][16], B[16][8], C[16][8];
      for (int t = 0; t < 32; ++t) {
        const int g = t / 4, q = t % 4;
        A[g][2 * q] = H(L[t].a[0], 0);
        A[g][2 * q + 1] = H(L[t].a[0], 1);
        A[g + 8][2 * q] = H(L[t].a[1], 0);
        A[g + 8][2 * q + 1] = H(L[t].a[1], 1);
        A[g][2 * q + 8] = H(L[t].a[2], 0);
        A[g][2 * q + 9] = H(L[t].a[2], 1);
        A[g + 8][2 * q + 8] = H(L[t].a[3], 0);
        A[g + 8][2 * q + 9] = H(L[t].a[3], 1);
        B[2 * q][g] = H(L[t].b0, 0);
        B[2 * q + 1][g] = H(L[t].b0, 1);
        B[2 * q + 8][g] = H(L[t].b1, 0);
        B[2 * q + 9][g] = H(L[t].b1, 1);
        C[g][2 * q] = L[t].c[0];
        C[g][2 * q + 1] = L[t].c[1];
        C[g + 8][2 * q] = L[t].c[2];
        C[g + 8][2 * q + 1] = L[t].c[3];
      }
      float D[16][8];
      for (int r = 0; r < 16; ++r) {
        for (int n = 0; n < 8; ++n) {
          float acc = C[r][n];
          for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][n];
          D[r][n] = acc;
        }
      }
      for (int t = 0; t < 32; ++t) {
        const int g = t / 4, q = t % 4;
        L[t].c[0] = D[g][2 * q];
        L[t].c[1] = D[g][2 * q + 1];
        L[t].c[2] = D[g + 8][2 * q];
        L[t].c[3] = D[g + 8][2 * q + 1];
      }
      break;
    }
    case Op::kWarpSync:
      break;  // every lane has arrived: release them
    default:
      Fail("not a warp op");
  }
  for (int t = 0; t < 32; ++t) L[t].op = Op::kNone;
}
}  // namespace

void Fail(const char* what) {
  std::fprintf(stderr, "EMU FAILURE: %s (block %u,%u thread %d)\n", what, blockIdx.x, blockIdx.y,
               cur);
  std::abort();
}

uint32_t SharedOffset(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (b < smem_base || b >= smem_base + smem_bytes) Fail("address not in shared memory");
  return static_cast<uint32_t>(b - smem_base);
}

void CopyAsync16(void* smem, const void* global) {
  SharedOffset(smem);
  if (reinterpret_cast<uintptr_t>(smem) % 16 || reinterpret_cast<uintptr_t>(global) % 16) {
    Fail("cp.async misaligned");
  }
  if (copy_at_issue) {
    std::memcpy(smem, global, 16);
  } else {
    // Read the source now (it must be valid memory), write at the wait.
    lanes[cur].open.push_back({smem, global});
  }
}
void Commit() {
  lanes[cur].groups.push_back(std::move(lanes[cur].open));
  lanes[cur].open.clear();
}
void WaitButOne() {
  auto& gs = lanes[cur].groups;
  while (gs.size() > 1) {
    DoCopies(gs.front());
    gs.pop_front();
  }
}

void LdMatrix(uint32_t addr, uint32_t (&r)[4], bool trans) {
  lanes[cur].addr = addr;
  lanes[cur].regs = r;
  Block(trans ? Op::kLdmT : Op::kLdm);
}
void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Lane& l = lanes[cur];
  l.c = c;
  std::memcpy(l.a, a, sizeof(l.a));
  l.b0 = b0;
  l.b1 = b1;
  Block(Op::kMma);
}
float ShflXor(float v, int mask) {
  lanes[cur].f = v;
  lanes[cur].i = mask;
  Block(Op::kShfl);
  return lanes[cur].f;
}
float ShflIdx(float v, int src) {
  lanes[cur].f = v;
  lanes[cur].i = src;
  Block(Op::kShflIdx);
  return lanes[cur].f;
}
int ReduceMin(int v) {
  lanes[cur].i = v;
  Block(Op::kMin);
  return lanes[cur].i;
}
int ReduceMax(int v) {
  lanes[cur].i = v;
  Block(Op::kMax);
  return lanes[cur].i;
}
void SyncThreads() { Block(Op::kBar); }
void SyncWarp() { Block(Op::kWarpSync); }

// Runs one CTA of `kernel` to completion.
void RunCta(std::function<void()> kernel, unsigned bx, unsigned by, uint32_t order_seed) {
  if (threads % 32 != 0 || threads < 32 || threads > kMaxThreads) Fail("CTA size");
  entry = std::move(kernel);
  blockDim.x = static_cast<unsigned>(threads);
  blockDim.y = blockDim.z = 1;
  blockIdx.x = bx;
  blockIdx.y = by;
  for (int t = 0; t < threads; ++t) {
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
    const int start = static_cast<int>((rng = rng * 1664525u + 1013904223u) >> 25) % threads;
    const bool reverse = (rng >> 7) & 1;
    for (int k = 0; k < threads; ++k) {
      const int t = reverse ? (start - k + threads) % threads : (start + k) % threads;
      if (lanes[t].op != Op::kNone) continue;
      cur = t;
      threadIdx.x = t;
      swapcontext(&sched, &lanes[t].ctx);
      ran = true;
    }
    if (ran) continue;
    bool progressed = false;
    for (int w = 0; w < threads / 32; ++w) {
      bool all = true;
      for (int t = 0; t < 32; ++t) {
        const Op op = lanes[32 * w + t].op;
        all = all && op != Op::kBar && op != Op::kDone && op != Op::kNone;
      }
      bool any = false;
      for (int t = 0; t < 32; ++t) {
        const Op op = lanes[32 * w + t].op;
        any = any || (op != Op::kBar && op != Op::kDone && op != Op::kNone);
      }
      if (all) {
        cur = -1;
        RunWarpOp(w);
        progressed = true;
      } else if (any) {
        // Some lanes at a warp op, others at a barrier or done: wait for them unless stuck.
        bool others_blocked = true;
        for (int t = 0; t < 32; ++t) {
          const Op op = lanes[32 * w + t].op;
          others_blocked = others_blocked && op != Op::kNone;
        }
        if (!others_blocked) continue;
      }
    }
    if (progressed) continue;
    int done = 0, bar = 0;
    for (int t = 0; t < threads; ++t) {
      done += lanes[t].op == Op::kDone;
      bar += lanes[t].op == Op::kBar;
    }
    if (done == threads) break;
    if (bar > 0 && bar + done == threads) {
      if (done > 0) Fail("__syncthreads with exited threads");
      for (int t = 0; t < threads; ++t) lanes[t].op = Op::kNone;
      continue;
    }
    Fail("deadlock: warp collective with lanes at a barrier or exited");
  }
}

void RunGrid(dim3 grid, dim3 block, size_t smem, const std::function<void()>& kernel) {
  if (block.y != 1 || block.z != 1) Fail("launch shape");
  threads = static_cast<int>(block.x);
  smem_bytes = smem;
  gridDim.x = grid.x;
  gridDim.y = grid.y;
  gridDim.z = 1;
  std::vector<std::pair<unsigned, unsigned>> order;
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) order.emplace_back(bx, by);
  }
  if (shuffle_ctas) {
    std::mt19937 rng(order_seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  for (const auto& [bx, by] : order) {
    if (smem > 0) std::memset(smem_base, 0xFF, smem);
    RunCta(kernel, bx, by, order_seed++);
    ++ctas;
  }
}
}  // namespace emu
