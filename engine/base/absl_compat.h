// Debian 12's Abseil is built with its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// which does not convert from std::string_view. Our interfaces use std::string_view; these
// helpers cross to Abseil where it needs its own type (StrCat, hash-map lookups, StrSplit).
// absl::StrFormat("%s", std_string_view) works as is.
#ifndef STEPSERVE_ENGINE_BASE_ABSL_COMPAT_H_
#define STEPSERVE_ENGINE_BASE_ABSL_COMPAT_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace stepserve {

inline absl::string_view AbslView(std::string_view view) {
  return absl::string_view(view.data(), view.size());
}

inline std::string_view StdView(absl::string_view view) {
  return std::string_view(view.data(), view.size());
}

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BASE_ABSL_COMPAT_H_
