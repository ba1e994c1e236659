// Stand-in for kernels/common/pdl.cuh under the emulator: PDL calls are no-ops and a launch runs
// every CTA of the grid (in a shuffled order) through emu::RunCta, with the launch's blockDim.x
// threads (a multiple of 32, up to emu::kMaxThreads).
#pragma once
#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <utility>

#include "emu_cuda.h"

namespace emu {
void RunCta(std::function<void()> kernel, unsigned bx, unsigned by, int threads,
            uint32_t order_seed);
extern uint32_t launch_seed;
extern unsigned last_grid_x, last_grid_y, last_block;
extern size_t last_smem;
extern long long n_ctas;
}  // namespace emu

namespace stepserve::kernels {
inline void AllowDependentLaunch() {}
inline void WaitForPrimaryGrid() {}
inline bool PdlEnabled() { return true; }
template <class... KernelArgs, class... Args>
cudaError_t LaunchOverlapping(bool, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                              size_t smem, cudaStream_t, Args&&... args) {
  emu::last_grid_x = grid.x;
  gridDim.x = grid.x;
  gridDim.y = grid.y;
  gridDim.z = 1;
  emu::last_grid_y = grid.y;
  emu::last_block = block.x;
  emu::last_smem = smem;
  if (block.x % 32 != 0 || block.x == 0 || block.x > unsigned(emu::kMaxThreads) || block.y != 1 ||
      block.z != 1 || grid.z != 1) {
    emu::Fail("launch shape");
  }
  if (smem > emu::smem_bytes) emu::Fail("dynamic shared memory larger than the emulator's");
  const size_t saved = emu::smem_bytes;
  emu::smem_bytes = smem;  // accesses past the launch's dynamic size fail
  std::vector<std::pair<unsigned, unsigned>> ctas;
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) ctas.push_back({bx, by});
  std::mt19937 rng(emu::launch_seed);
  std::shuffle(ctas.begin(), ctas.end(), rng);
  for (const auto& [bx, by] : ctas) {
    std::memset(emu::smem_base, 0xFF, saved);  // poison: stale or never-copied data shows
    emu::RunCta([&] { kernel(args...); }, bx, by, static_cast<int>(block.x),
                emu::launch_seed++ * 7919u + bx * 131u + by);
    ++emu::n_ctas;
  }
  emu::smem_bytes = saved;
  return cudaSuccess;
}
template <class... KernelArgs, class... Args>
cudaError_t LaunchWithPdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  return LaunchOverlapping(PdlEnabled(), kernel, grid, block, smem, stream,
                           std::forward<Args>(args)...);
}
}  // namespace stepserve::kernels
