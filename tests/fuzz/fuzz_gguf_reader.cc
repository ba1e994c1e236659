// libFuzzer entry point for the GGUF parser: any byte string must either be rejected with an
// error or yield a file whose every exposed byte range lies inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/gguf/gguf_reader.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();  // reported by libFuzzer as a crash
}

void Walk(std::string_view bytes, const stepserve::gguf::OpenOptions& options) {
  auto file = stepserve::gguf::GgufFile::FromBuffer(bytes, "fuzz", options);
  if (!file.ok()) {
    Check(!file.status().message().empty());
    return;
  }
  const auto* base = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t chars = 0;
  for (const auto& [key, value] : (*file)->metadata().entries()) {
    chars += key.size() + value.ToString().size();
    Check((*file)->metadata().Find(key) != nullptr);
  }
  volatile uint8_t sink = 0;
  for (const auto& t : (*file)->tensors()) {
    Check(t.data == base + t.file_offset);
    Check(t.file_offset <= bytes.size() && t.nbytes <= bytes.size() - t.file_offset);
    Check(t.n_elements() >= 0);
    Check((*file)->FindTensor(t.name) == &t);
    // Touch both ends so ASan sees any out-of-range pointer.
    if (t.nbytes > 0) sink = sink + t.data[0] + t.data[t.nbytes - 1];
    chars += t.ShapeString().size();
  }
  (void)(*file)->architecture();
  (void)(*file)->total_tensor_bytes();
  (void)sink;
  (void)chars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A private copy so reads past `size` hit ASan's redzone rather than libFuzzer's buffer slack.
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Walk(bytes, {});
  stepserve::gguf::OpenOptions strict;
  strict.strict_layout = true;
  Walk(bytes, strict);
  return 0;
}
