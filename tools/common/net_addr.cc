#include "common/net_addr.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ckpt::tools {

absl::StatusOr<std::string> LocalAddressToward(const std::string& host_port) {
  std::string target = host_port.substr(0, host_port.find(','));
  std::string host, port;
  if (!target.empty() && target.front() == '[') {
    const size_t close = target.find(']');
    if (close == std::string::npos || close + 1 >= target.size() || target[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("'", target, "' is not [IPV6]:PORT"));
    }
    host = target.substr(1, close - 1);
    port = target.substr(close + 2);
  } else {
    const size_t colon = target.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", target, "' is not HOST:PORT"));
    }
    host = target.substr(0, colon);
    port = target.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string error;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // A datagram socket's connect only picks the route and source address.
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      error = std::strerror(errno);
      close(fd);
      continue;
    }
    close(fd);
    char text[INET6_ADDRSTRLEN] = {0};
    if (local.ss_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, text, sizeof(text));
      freeaddrinfo(found);
      return std::string(text);
    }
    if (local.ss_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, text, sizeof(text));
      freeaddrinfo(found);
      return absl::StrCat("[", text, "]");
    }
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("no route from this host to ", target, error.empty() ? "" : absl::StrCat(" (", error, ")")));
}

}  // namespace ckpt::tools
