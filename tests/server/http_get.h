// Test helpers shared by the server tests: a plain HTTP/1.0 GET over a loopback socket (what a
// Prometheus scrape does), and the metric names of docs/metrics.md's contract table.
#ifndef STEPSERVE_TESTS_SERVER_HTTP_GET_H_
#define STEPSERVE_TESTS_SERVER_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace stepserve::testing {

// Returns the response body, or "" with `*error` set.
inline std::string HttpGet(int port, const std::string& path, std::string* error) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    *error = "connect failed";
    return "";
  }
  const std::string req =
      "GET " + path + " HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    *error = "write failed";
    return "";
  }
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, n);
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.find(" 200 ") == std::string::npos ||
      body == std::string::npos) {
    *error = "bad response: " + resp.substr(0, 200);
    return "";
  }
  return resp.substr(body + 4);
}

// name -> type of every row of the table under "## Metrics" in docs/metrics.md.
inline std::map<std::string, std::string> ContractMetrics() {
  std::ifstream in(std::string(STEPSERVE_SOURCE_DIR) + "/docs/metrics.md");
  std::map<std::string, std::string> out;
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Metrics";
    if (!in_section || line.rfind("| `stepserve_", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    const std::string name = line.substr(3, end - 3);
    const size_t c1 = line.find('|', end);
    const size_t c2 = line.find('|', c1 + 1);
    std::string type = line.substr(c1 + 1, c2 - c1 - 1);
    type.erase(0, type.find_first_not_of(' '));
    type.erase(type.find_last_not_of(' ') + 1);
    out[name] = type;
  }
  return out;
}

}  // namespace stepserve::testing

#endif  // STEPSERVE_TESTS_SERVER_HTTP_GET_H_
