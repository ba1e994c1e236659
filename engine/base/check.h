// CHECK for invariants (programming errors), not for untrusted input: that gets absl::Status.
// Debian 12's Abseil (20220623) predates absl/log, hence our own.
#ifndef STEPSERVE_ENGINE_BASE_CHECK_H_
#define STEPSERVE_ENGINE_BASE_CHECK_H_

#include <cstdio>
#include <cstdlib>

namespace stepserve::internal {
[[noreturn]] inline void CheckFailed(const char* condition, const char* file, int line,
                                     const char* message) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s%s%s\n", file, line, condition,
               message[0] ? ": " : "", message);
  std::abort();
}
}  // namespace stepserve::internal

// STEPSERVE_CHECK(cond) or STEPSERVE_CHECK(cond, "message")
#define STEPSERVE_CHECK(condition, ...)                                                   \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      ::stepserve::internal::CheckFailed(#condition, __FILE__, __LINE__, "" __VA_ARGS__); \
    }                                                                                     \
  } while (0)

#endif  // STEPSERVE_ENGINE_BASE_CHECK_H_
