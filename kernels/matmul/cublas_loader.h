// cuBLAS loaded at run time (dlopen) instead of linked. libcublasLt carries ~94 KiB of thread-local
// storage; linked into the process it is carved out of every thread's stack, and civetweb (the
// Prometheus exposer) creates its threads with ~100 KiB stacks, so pthread_create failed with
// EINVAL and `stepserve serve` could not open its metrics port in CUDA builds. A dlopen'ed library
// gets its TLS allocated lazily, outside the stacks. It also keeps cuBLAS off the start-up path of
// CPU-only runs of a CUDA build.
#ifndef STEPSERVE_KERNELS_MATMUL_CUBLAS_LOADER_H_
#define STEPSERVE_KERNELS_MATMUL_CUBLAS_LOADER_H_

#include <cublas_v2.h>

#include <string>

namespace stepserve::kernels {

// The few cuBLAS entry points the GEMM path uses.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                          const float*, const float*, int, const float*, int, const float*, float*,
                          int) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*sgemm_strided_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                          int, int, const float*, const float*, int, long long,
                                          const float*, int, long long, const float*, float*, int,
                                          long long, int) = nullptr;
};

// Loads cuBLAS once per process (thread-safe): $STEPSERVE_CUBLAS if set, else libcublas.so.<major>
// through the loader's search path, else the CUDA toolkit's lib64. Null when it cannot be found;
// `error` (optional) then says what was tried.
const CublasApi* LoadCublas(std::string* error = nullptr);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MATMUL_CUBLAS_LOADER_H_
