# prefill_attention_cuda.cu -> host-compilable source for the emulator: the whole file (device and
# host parts), pdl.cuh replaced by the harness, the inline-asm wrappers re-pointed at emu::.
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
def replace_fn(text, signature_start, new):
    i = text.index(signature_start)
    j = text.index('{', i)
    depth, k = 0, j
    while True:
        if text[k] == '{': depth += 1
        elif text[k] == '}':
            depth -= 1
            if depth == 0: break
        k += 1
    return text[:i] + new + text[k + 1:]
reps = [
 ('__device__ __forceinline__ void LdMatrixX4(', 'inline void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) { emu::LdMatrix(addr, r, false); }'),
 ('__device__ __forceinline__ void LdMatrixX4Trans(', 'inline void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) { emu::LdMatrix(addr, r, true); }'),
 ('__device__ __forceinline__ void Mma(', 'inline void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu::Mma(c, a, b0, b1); }'),
]
for sig, new in reps:
    src = replace_fn(src, sig, new)
assert 'asm(' not in src and 'asm volatile' not in src
src = src.replace('\n}  // namespace\n\nbool PrefillAttentionCudaSupports',
                  '\nuint8_t* EmuSmem() { return reinterpret_cast<uint8_t*>(smem4); }\n}  // namespace\n\nbool PrefillAttentionCudaSupports', 1)
assert 'EmuSmem' in src
open(os.path.join(out, 'kernel_emu.inc'), 'w').write(src)
