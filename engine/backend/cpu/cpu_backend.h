// The CPU Backend: validates views, then runs the optimised kernels from kernels/ on a thread pool.
#ifndef STEPSERVE_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
#define STEPSERVE_ENGINE_BACKEND_CPU_CPU_BACKEND_H_

#include <memory>

#include "engine/backend/backend.h"

namespace stepserve {

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
