#include "server/auth.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace stepserve::server {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Walk the longer length so a short guess takes as long as a full one.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

absl::StatusOr<std::unique_ptr<BearerAuth>> BearerAuth::Create(std::string path) {
  std::unique_ptr<BearerAuth> auth(new BearerAuth(std::move(path)));
  absl::Status status = auth->Refresh();
  if (!status.ok()) return status;
  return auth;
}

absl::Status BearerAuth::Refresh() {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrFormat("--auth-token-file %s: cannot stat", path_));
  }
  if (st.st_mtim.tv_sec == mtime_.tv_sec && st.st_mtim.tv_nsec == mtime_.tv_nsec &&
      st.st_size == size_ && !token_.empty()) {
    return absl::OkStatus();
  }
  std::ifstream in(path_, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("--auth-token-file %s: cannot read", path_));
  }
  std::string token = content.str();
  absl::StripAsciiWhitespace(&token);
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--auth-token-file %s: the file is empty", path_));
  }
  token_ = std::move(token);
  mtime_ = st.st_mtim;
  size_ = st.st_size;
  return absl::OkStatus();
}

absl::Status BearerAuth::Check(std::string_view authorization) {
  std::string token;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // One stat per second at most: rotation is picked up quickly without a syscall per call.
    const std::time_t now = std::time(nullptr);
    if (now != last_stat_) {
      last_stat_ = now;
      (void)Refresh();  // a failed re-read keeps the previous token
    }
    token = token_;
  }
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing metadata 'authorization: Bearer <token>'");
  }
  if (authorization.substr(0, kPrefix.size()) != kPrefix ||
      !ConstantTimeEquals(authorization.substr(kPrefix.size()), token)) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace stepserve::server
