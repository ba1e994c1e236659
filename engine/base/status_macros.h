// Early-return helpers for absl::Status / absl::StatusOr (Abseil's own are not public).
#ifndef STEPSERVE_ENGINE_BASE_STATUS_MACROS_H_
#define STEPSERVE_ENGINE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STEPSERVE_STATUS_CONCAT_INNER(a, b) a##b
#define STEPSERVE_STATUS_CONCAT(a, b) STEPSERVE_STATUS_CONCAT_INNER(a, b)

#define STEPSERVE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = *std::move(tmp)

// ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr; returns its status on error, else assigns.
#define ASSIGN_OR_RETURN(lhs, expr) \
  STEPSERVE_ASSIGN_OR_RETURN_IMPL(STEPSERVE_STATUS_CONCAT(status_or_, __LINE__), lhs, expr)

// RETURN_IF_ERROR(expr): returns the status of expr when it is not OK.
#define RETURN_IF_ERROR(expr)                                                 \
  do {                                                                        \
    if (::absl::Status stepserve_status_ = (expr); !stepserve_status_.ok()) { \
      return stepserve_status_;                                               \
    }                                                                         \
  } while (0)

#endif  // STEPSERVE_ENGINE_BASE_STATUS_MACROS_H_
