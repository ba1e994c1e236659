// --backend / --device, shared by `generate`, `eval` and `serve`, and the load progress line the
// one-shot commands print while weights are placed on the backend.
#ifndef STEPSERVE_SERVER_CLI_BACKEND_FLAGS_H_
#define STEPSERVE_SERVER_CLI_BACKEND_FLAGS_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/backend/backend.h"
#include "engine/model/placed_weights.h"
#include "server/args.h"

namespace stepserve::cli {

struct BackendFlags {
  std::string backend = "cpu";
  int64_t device = 0;
};

inline void AddBackendFlags(ArgParser& parser, BackendFlags* flags) {
  parser.AddString("backend", &flags->backend, "compute backend: cpu or cuda");
  parser.AddInt("device", &flags->device, "CUDA device index for --backend cuda");
}

// "" when the flags are usable; otherwise a message naming the flag. An unknown backend lists the
// registered ones (a build without CUDA has no "cuda").
inline std::string ValidateBackendFlags(const BackendFlags& flags) {
  const std::vector<std::string> known = RegisteredBackends();
  bool found = false;
  for (const std::string& name : known) found = found || name == flags.backend;
  if (!found) {
    return absl::StrFormat("--backend \"%s\" is not one of: %s", flags.backend,
                           absl::StrJoin(known, ", "));
  }
  if (flags.device < 0) return absl::StrFormat("--device must be >= 0, got %d", flags.device);
  return "";
}

// Prints "loading weights: 30% (x / y bytes)" to stderr at each new tenth.
inline model::LoadProgress StderrLoadProgress() {
  return [last_tenth = -1](uint64_t done, uint64_t total, std::string_view) mutable {
    const int tenth = total > 0 ? static_cast<int>(done * 10 / total) : 10;
    if (tenth == last_tenth) return;
    last_tenth = tenth;
    std::fprintf(stderr, "loading weights: %d%% (%llu / %llu bytes)\n", tenth * 10,
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
  };
}

}  // namespace stepserve::cli

#endif  // STEPSERVE_SERVER_CLI_BACKEND_FLAGS_H_
