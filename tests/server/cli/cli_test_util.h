// Helpers for tests that run the built `stepserve` binary: run a command line capturing exit
// code, stdout and stderr; make a tiny synthetic model once per test binary.
#ifndef STEPSERVE_TESTS_SERVER_CLI_CLI_TEST_UTIL_H_
#define STEPSERVE_TESTS_SERVER_CLI_CLI_TEST_UTIL_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace stepserve::cli::testing {

inline std::string Binary() { return std::string(STEPSERVE_BINARY_DIR) + "/server/stepserve"; }

// Single-quotes `s` for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "stepserve-cli-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `stepserve <args>` (args already shell-quoted where needed).
inline RunResult RunStepserve(const TempDir& dir, const std::string& args) {
  const std::string out = dir.File("stdout.txt"), err = dir.File("stderr.txt");
  const std::string command =
      ShellQuote(Binary()) + " " + args + " >" + ShellQuote(out) + " 2>" + ShellQuote(err);
  RunResult result;
  const int status = std::system(command.c_str());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = ReadAll(out);
  result.err = ReadAll(err);
  return result;
}

}  // namespace stepserve::cli::testing

#endif  // STEPSERVE_TESTS_SERVER_CLI_CLI_TEST_UTIL_H_
