# prefill_attention_cuda.cu -> host-compilable source for the emulator: the whole file (device and
# host parts), pdl.cuh replaced by the harness, the inline-asm wrappers (attention_mma.cuh) by
# emulated ones (emu_mma_wrappers.py).
# Usage: transform.py OUT_DIR [KERNEL_SOURCE] (default: the repository's kernel; a mutated copy
# to check that the emulation catches an injected bug).
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, '..', '..', '..')
out = sys.argv[1]
kernel = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, 'kernels/attention/prefill_attention_cuda.cu')
os.makedirs(out, exist_ok=True)
src = open(kernel).read()
src = src.replace('#include "kernels/common/pdl.cuh"\n', '')
src = src.replace('#include <cuda_fp16.h>\n', '')
# cp.async primitives (kernels/common/cp_async.cuh) -> emu::, declared in place of the include.
src = src.replace('#include "kernels/common/cp_async.cuh"\n',
                  'namespace stepserve::kernels {\n'
                  'inline uint32_t SharedAddress(const void* p) { return emu::SharedOffset(p); }\n'
                  'inline void CopyAsync16(void* s, const void* g) { emu::CopyAsync16(s, g); }\n'
                  'inline void CommitCopies() { emu::Commit(); }\n'
                  'inline void WaitCopiesButOne() { emu::WaitButOne(); }\n'
                  '}  // namespace stepserve::kernels\n')
src = src.replace('namespace {', 'namespace {\nalignas(16) uint4 smem4[110000 / 16];\n', 1)
sys.path.insert(0, here)
import emu_mma_wrappers  # noqa: E402  (the tensor-core wrappers' emulated definitions)
src = emu_mma_wrappers.emulated(src)
assert 'asm(' not in src and 'asm volatile' not in src
src = src.replace('\n}  // namespace\n\nbool PrefillAttentionCudaSupports',
                  '\nuint8_t* EmuSmem() { return reinterpret_cast<uint8_t*>(smem4); }\n}  // namespace\n\nbool PrefillAttentionCudaSupports', 1)
assert 'EmuSmem' in src
open(os.path.join(out, 'kernel_emu.inc'), 'w').write(src)
