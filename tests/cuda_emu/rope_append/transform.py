# The q/k norm + RoPE and KV append kernel sources -> one host-compilable source for the emulator
# (../prefill_attention/emu_cuda.*): rope_cuda.cu, kv_append_cuda.cu and kv_append_rope_cuda.cu
# (device and host parts) with pdl.cuh replaced by the harness.
# Usage: transform.py OUT_DIR [FUSED_KERNEL_SOURCE] (default: the repository's
# kv_append_rope_cuda.cu; a mutated copy to check that the emulation catches an injected bug).
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, '..', '..', '..')
out = sys.argv[1]
fused = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, 'kernels/attention/kv_append_rope_cuda.cu')
os.makedirs(out, exist_ok=True)
parts = []
for path, name in [(os.path.join(root, 'kernels/rope/rope_cuda.cu'), 'rope'),
                   (os.path.join(root, 'kernels/attention/kv_append_cuda.cu'), 'append'),
                   (fused, 'fused')]:
    src = open(path).read()
    src = src.replace('#include "kernels/common/pdl.cuh"\n', '')
    # Each file's anonymous namespace gets a name of its own, so their kWarpsPerBlock / kThreads
    # and helper names do not collide in one translation unit.
    src = src.replace('namespace {\n', 'namespace emu_%s {\n' % name)
    src = src.replace('}  // namespace\n', '}  // namespace emu_%s\nusing namespace emu_%s;\n' % (name, name))
    src = src.replace('kWarpsPerBlock', 'kWarpsPerBlock_' + name)  # defined by two of the files
    assert 'asm(' not in src and 'asm volatile' not in src
    parts.append(src)
open(os.path.join(out, 'kernel_emu.inc'), 'w').write('\n'.join(parts))
