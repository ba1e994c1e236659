// The launch side of the emulated kernels, for a test's one translation unit (the attention
// emulations and rope_append's): emu_pdl.h's inline pieces (the programmatic-launch wait and
// trigger, LaunchWithPdl) and the runtime calls the kernels' host code makes, defined here once.
// Verification harness only.
#pragma once

#include "emu_cuda.h"
#include "emu_pdl.h"

cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
