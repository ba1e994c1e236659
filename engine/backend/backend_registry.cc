// Name -> factory map for backends. "cpu" is added on first use (not by a static initialiser,
// which a static library link could drop).
#include <map>
#include <mutex>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#if STEPSERVE_HAVE_CUDA_BACKEND
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace stepserve {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, BackendFactory, std::less<>> factories;
};

Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    r->factories.emplace(
        "cpu", [](const BackendOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
          return CreateCpuBackend(options);
        });
#if STEPSERVE_HAVE_CUDA_BACKEND
    r->factories.emplace("cuda", [](const BackendOptions& options) {
      return CudaBackend::Create(options);
    });
#endif
    return r;
  }();
  return *registry;
}

}  // namespace

absl::Status RegisterBackend(std::string_view name, BackendFactory factory) {
  if (name.empty() || !factory)
    return absl::InvalidArgumentError("RegisterBackend: empty name or factory");
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  if (!registry.factories.emplace(std::string(name), std::move(factory)).second) {
    return absl::AlreadyExistsError(absl::StrFormat("backend \"%s\" is already registered", name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name,
                                                       const BackendOptions& options) {
  BackendFactory factory;
  {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.factories.find(name);
    if (it == registry.factories.end()) {
      std::vector<std::string> names;
      for (const auto& [known, unused] : registry.factories) names.push_back(known);
      return absl::NotFoundError(
          absl::StrFormat("unknown backend \"%s\" (known: %s)", name, absl::StrJoin(names, ", ")));
    }
    factory = it->second;
  }
  return factory(options);
}

std::vector<std::string> RegisteredBackends() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  std::vector<std::string> names;
  for (const auto& [name, unused] : registry.factories) names.push_back(name);
  return names;
}

}  // namespace stepserve
