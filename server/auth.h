// Bearer-token check for --auth-token-file: the token is the file's content with surrounding
// whitespace trimmed, re-read when the file changes (Kubernetes rotates mounted secrets by
// swapping the file), and compared in constant time.
#ifndef STEPSERVE_SERVER_AUTH_H_
#define STEPSERVE_SERVER_AUTH_H_

#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace stepserve::server {

class BearerAuth {
 public:
  // Reads the file once; an unreadable or empty token file is an error at start-up.
  static absl::StatusOr<std::unique_ptr<BearerAuth>> Create(std::string path);

  // `authorization` is the request's metadata value. OK or UNAUTHENTICATED (never says which
  // part was wrong beyond "missing" / "invalid", so the token cannot be probed).
  absl::Status Check(std::string_view authorization);

 private:
  explicit BearerAuth(std::string path) : path_(std::move(path)) {}
  // Re-reads the file when its mtime or size changed; keeps the last good token on a read error.
  absl::Status Refresh();

  std::string path_;
  std::mutex mu_;
  std::string token_;
  struct timespec mtime_ = {};
  off_t size_ = -1;
  std::time_t last_stat_ = 0;
};

// Constant-time comparison (time depends only on the lengths).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_AUTH_H_
