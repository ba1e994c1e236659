#include "kernels/matmul/cublas_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace stepserve::kernels {
namespace {

struct Loaded {
  CublasApi api;
  bool ok = false;
  std::string error;
};

template <typename Fn>
bool Bind(void* lib, const char* name, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr) *error += std::string("missing symbol ") + name + "; ";
  return *fn != nullptr;
}

Loaded Load() {
  Loaded l;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("STEPSERVE_CUBLAS"); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  }
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  candidates.push_back(soname);
  candidates.push_back("/usr/local/cuda/lib64/" + soname);
  candidates.push_back("/usr/local/cuda/targets/x86_64-linux/lib/" + soname);
  void* lib = nullptr;
  for (const std::string& path : candidates) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* why = dlerror();
    l.error += path + ": " + (why != nullptr ? why : "not found") + "; ";
  }
  if (lib == nullptr) return l;
  l.error.clear();
  bool ok = Bind(lib, "cublasCreate_v2", &l.api.create, &l.error);
  ok = Bind(lib, "cublasDestroy_v2", &l.api.destroy, &l.error) && ok;
  ok = Bind(lib, "cublasSetStream_v2", &l.api.set_stream, &l.error) && ok;
  ok = Bind(lib, "cublasSgemm_v2", &l.api.sgemm, &l.error) && ok;
  ok = Bind(lib, "cublasGemmEx", &l.api.gemm_ex, &l.error) && ok;
  ok = Bind(lib, "cublasSgemmStridedBatched", &l.api.sgemm_strided_batched, &l.error) && ok;
  l.ok = ok;
  return l;  // the library stays loaded for the life of the process
}

}  // namespace

const CublasApi* LoadCublas(std::string* error) {
  static const Loaded* loaded = new Loaded(Load());
  if (!loaded->ok) {
    if (error != nullptr) *error = "cannot load cuBLAS: " + loaded->error;
    return nullptr;
  }
  return &loaded->api;
}

}  // namespace stepserve::kernels
