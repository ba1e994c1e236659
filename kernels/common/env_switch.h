// The run-time switches of the CUDA kernels and backend (docs/cuda-engine.md's switch table),
// read once by their callers into a function-local static: on-by-default ones (STEPSERVE_<NAME>=0
// turns one off for an A/B run, anything else or unset leaves it on) and off-by-default ones
// (STEPSERVE_<NAME>=1 turns one on: a path not yet measured or tested on a device).
#ifndef STEPSERVE_KERNELS_COMMON_ENV_SWITCH_H_
#define STEPSERVE_KERNELS_COMMON_ENV_SWITCH_H_

#include <cstdlib>

namespace stepserve::kernels {

// False only when the environment variable `name` is set and starts with '0'.
inline bool EnvSwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || v[0] != '0';
}

// True only when the environment variable `name` is set and starts with '1'.
inline bool EnvSwitchSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] == '1';
}

// The digit the environment variable `name` starts with (a switch with levels: 0 off, 1, 2, ..),
// `fallback` when it is unset or does not start with a digit.
inline int EnvSwitchLevel(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] >= '0' && v[0] <= '9' ? v[0] - '0' : fallback;
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_ENV_SWITCH_H_
