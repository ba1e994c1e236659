# The attention kernels' tensor-core wrappers (kernels/attention/attention_mma.cuh) for the host
# emulations: `emulated(src)` swaps the header's include in a kernel source for host definitions -
# ldmatrix and mma.sync through the emulator (emu_cuda.h), the F16 packing through cuda_fp16.h's
# host conversion (round to nearest even, as on the device). Used by this directory's transform.py
# and by ../paged_attention/transform.py.
INCLUDE = '#include "kernels/attention/attention_mma.cuh"\n'
DEFINITIONS = '''namespace stepserve::kernels::attention_mma {
inline uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &h, sizeof(r));
  return r;
}
inline void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) { emu::LdMatrix(addr, r, false); }
inline void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) { emu::LdMatrix(addr, r, true); }
inline void MmaF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu::Mma(c, a, b0, b1);
}
}  // namespace stepserve::kernels::attention_mma
'''


def emulated(src):
    assert src.count(INCLUDE) == 1, 'the kernel source must include attention_mma.cuh once'
    return src.replace(INCLUDE, DEFINITIONS)
