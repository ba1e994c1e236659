// Test helpers: temp directories, file I/O, and a raw little-endian GGUF byte builder for files
// the writer would refuse to produce (corrupt, hostile, v2, nested arrays by hand).
#ifndef STEPSERVE_TESTS_ENGINE_GGUF_GGUF_TEST_UTIL_H_
#define STEPSERVE_TESTS_ENGINE_GGUF_GGUF_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>

namespace stepserve::gguf::testing {

// A fresh directory under TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "stepserve-gguf-XXXXXX").string();
    char* made = mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFileBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xFF);
  return out;
}

// Appends little-endian fields.
class ByteBuilder {
 public:
  template <typename T>
  ByteBuilder& Put(T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    bytes_.append(buf, sizeof(T));
    return *this;
  }
  ByteBuilder& Str(std::string_view s) {
    Put<uint64_t>(s.size());
    bytes_.append(s);
    return *this;
  }
  ByteBuilder& Raw(std::string_view s) {
    bytes_.append(s);
    return *this;
  }
  ByteBuilder& Header(uint32_t version, int64_t n_tensors, int64_t n_kv) {
    bytes_.append("GGUF");
    return Put(version).Put(n_tensors).Put(n_kv);
  }
  ByteBuilder& PadTo(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back('\0');
    return *this;
  }
  size_t size() const { return bytes_.size(); }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace stepserve::gguf::testing

#endif  // STEPSERVE_TESTS_ENGINE_GGUF_GGUF_TEST_UTIL_H_
