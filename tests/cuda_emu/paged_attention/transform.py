# paged_attention_cuda.cu (the decode attention kernel, its split-K combine kernels and the host
# launcher) -> a host-compilable source for the emulator (../prefill_attention/emu_cuda.*):
# pdl.cuh replaced by the harness, arrival.cuh's inline asm by plain host arithmetic (CTAs run one
# after another, so an arrival is an add), the dynamic shared memory by the emulator's area.
# Usage: transform.py OUT_DIR [KERNEL_SOURCE] (default: the repository's kernel; a mutated copy to
# check that the emulation catches an injected bug).
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, '..', '..', '..')
out = sys.argv[1]
kernel = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, 'kernels/attention/paged_attention_cuda.cu')
os.makedirs(out, exist_ok=True)
src = open(kernel).read()
src = src.replace('#include "kernels/common/pdl.cuh"\n', '')
src = src.replace('#include <cuda_fp16.h>\n', '')
src = src.replace('#include "kernels/common/arrival.cuh"\n',
                  'namespace stepserve::kernels {\n'
                  'inline int ArriveRelease(int* counter, int amount = 1) {\n'
                  '  const int previous = *counter;\n'
                  '  *counter += amount;\n'
                  '  return previous;\n'
                  '}\n'
                  'inline void AcquireAfterArrivals() {}\n'
                  '}  // namespace stepserve::kernels\n')
old = '  extern __shared__ float4 smem4[];\n'
assert src.count(old) == 1
src = src.replace(old, '  float4* smem4 = reinterpret_cast<float4*>(emu::smem_base);\n')
assert 'asm(' not in src and 'asm volatile' not in src
# The combine kernels' header is inlined from EMU_COMBINE_SOURCE when set (a mutated copy, see
# mutations.sh), else from the repository; the rest of the include path stays the repository's.
combine_include = '#include "kernels/attention/paged_attention_cuda_combine_kernels.cuh"\n'
assert src.count(combine_include) == 1
combine = os.environ.get('EMU_COMBINE_SOURCE') or os.path.join(
    root, 'kernels/attention/paged_attention_cuda_combine_kernels.cuh')
src = src.replace(combine_include, open(combine).read())
# The tensor-core decode kernel's header is inlined too (EMU_MMA_SOURCE: a mutated copy), with
# its inline-asm wrappers (attention_mma.cuh) replaced by emulated ones (emu_mma_wrappers.py).
mma_include = '#include "kernels/attention/paged_attention_cuda_mma.cuh"\n'
assert src.count(mma_include) == 1
mma = open(os.environ.get('EMU_MMA_SOURCE') or os.path.join(
    root, 'kernels/attention/paged_attention_cuda_mma.cuh')).read()
sys.path.insert(0, os.path.join(here, '..', 'prefill_attention'))
import emu_mma_wrappers  # noqa: E402  (the tensor-core wrappers' emulated definitions)
mma = emu_mma_wrappers.emulated(mma)
mma = mma.replace('#include "kernels/common/pdl.cuh"\n', '').replace('#include <cuda_fp16.h>\n', '')
assert 'asm(' not in mma and 'asm volatile' not in mma
src = src.replace(mma_include, mma)
src = src.replace('#include "kernels/common/pdl.cuh"\n', '')
open(os.path.join(out, 'kernel_emu.inc'), 'w').write(src)
