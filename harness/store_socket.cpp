#include "harness/store_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace ddpbench {
namespace {

std::string Numeric(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST] = "";
  if (::getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

// A socket listening on `ai`, or -1 with errno set.
int Listen(const addrinfo& ai, int* port) {
  int fd = ::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage bound {};
  socklen_t len = sizeof(bound);
  if (::bind(fd, ai.ai_addr, ai.ai_addrlen) != 0 || ::listen(fd, 2048) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

bool IsLoopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr) >> 24) == 127;
  if (addr->sa_family != AF_INET6) return false;
  const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

}  // namespace

StoreSocket ListenForStore(const std::string& host, int port, bool fallback_to_all, bool remote_peers) {
  addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = host.empty() ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw std::runtime_error(fmt::format("cannot resolve {} to serve the store: {}", host, gai_strerror(rc)));
  StoreSocket s;
  std::string tried;
  int error = 0;
  bool unreachable_loopback = false;
  for (addrinfo* ai = found; ai && s.fd < 0; ai = ai->ai_next) {
    if (remote_peers && fallback_to_all && IsLoopback(ai->ai_addr)) {
      unreachable_loopback = true;
      continue;
    }
    s.fd = Listen(*ai, &s.port);
    if (s.fd >= 0) s.bind = host.empty() ? "*" : Numeric(ai->ai_addr, ai->ai_addrlen);
    else error = errno, tried += (tried.empty() ? "" : ", ") + Numeric(ai->ai_addr, ai->ai_addrlen);
  }
  ::freeaddrinfo(found);
  if (s.fd >= 0) return s;
  if (fallback_to_all && (error == EADDRNOTAVAIL || unreachable_loopback) && !host.empty())
    return ListenForStore("", port, false);
  throw std::runtime_error(fmt::format("cannot listen on {}:{} ({}) to serve the store: {}",
                                       host.empty() ? "*" : host, port, tried, std::strerror(error)));
}

}  // namespace ddpbench
