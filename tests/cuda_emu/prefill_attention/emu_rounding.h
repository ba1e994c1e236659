// The explicitly rounded float intrinsics (__fdiv_rn, __fmul_rn, __fadd_rn, __fsub_rn) as plain
// host arithmetic, which rounds each operation to nearest the same way (-std=c++20 does not
// contract into fused multiply-adds). Included by the emulations whose kernels spell their rounding
// out (kv_append_store.cuh, qk_norm_rope.cuh). Verification harness only.
#pragma once

inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
