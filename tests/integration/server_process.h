// Runs the real `stepserve serve` binary as a child process for integration tests: free loopback
// ports (--listen 127.0.0.1:0), the ports read back from its log, readiness awaited, signals sent.
#ifndef STEPSERVE_TESTS_INTEGRATION_SERVER_PROCESS_H_
#define STEPSERVE_TESTS_INTEGRATION_SERVER_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace stepserve::testing {

inline std::string BinaryPath() { return std::string(STEPSERVE_BINARY_DIR) + "/server/stepserve"; }

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ServerProcess {
 public:
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Starts `stepserve serve ARGS --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0` and waits
  // until it logs "ready" (or exits / times out: then false and log() says why).
  bool Start(const std::vector<std::string>& args, const std::string& log_path) {
    log_path_ = log_path;
    std::vector<std::string> argv = {BinaryPath(),       "serve",      "--listen", "127.0.0.1:0",
                                     "--metrics-listen", "127.0.0.1:0"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = freopen(log_path.c_str(), "w", stderr);
      (void)f;
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    const std::regex grpc_re("grpc listening on port (\\d+)");
    const std::regex metrics_re("metrics listening on port (\\d+)");
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string text = ReadAll(log_path_);
      std::smatch m;
      if (port_ == 0 && std::regex_search(text, m, grpc_re)) port_ = std::stoi(m[1]);
      if (metrics_port_ == 0 && std::regex_search(text, m, metrics_re)) {
        metrics_port_ = std::stoi(m[1]);
      }
      if (text.find("stepserve: ready") != std::string::npos && port_ != 0) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  void Signal(int sig) { kill(pid_, sig); }
  // The exit status (128 + signal when killed), or -1 on timeout.
  int WaitExit(std::chrono::seconds timeout) {
    if (pid_ <= 0) return exit_status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return ReadAll(log_path_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  int exit_status_ = -1;
  std::string log_path_;
};

}  // namespace stepserve::testing

#endif  // STEPSERVE_TESTS_INTEGRATION_SERVER_PROCESS_H_
