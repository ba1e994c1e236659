// The on-by-default run-time switches of the CUDA kernels and backend (docs/cuda-engine.md's
// switch table): STEPSERVE_<NAME>=0 turns one off for an A/B run, anything else or unset leaves
// it on. Callers read it once, into a function-local static.
#ifndef STEPSERVE_KERNELS_COMMON_ENV_SWITCH_H_
#define STEPSERVE_KERNELS_COMMON_ENV_SWITCH_H_

#include <cstdlib>

namespace stepserve::kernels {

// False only when the environment variable `name` is set and starts with '0'.
inline bool EnvSwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || v[0] != '0';
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_ENV_SWITCH_H_
