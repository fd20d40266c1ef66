// See socket_ifname.h.
#include "harness/socket_ifname.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>

namespace ddpbench {
namespace {

// True when `a` and `b` agree on every bit that `mask` sets (`n` bytes).
bool SameSubnet(const unsigned char* a, const unsigned char* b, const unsigned char* mask, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((a[i] & mask[i]) != (b[i] & mask[i])) return false;
  return true;
}

}  // namespace

std::string InterfaceForAddress(const std::string& address) {
  const std::string addr = address == "localhost" ? "127.0.0.1" : address;
  in_addr v4{};
  in6_addr v6{};
  const bool is4 = inet_pton(AF_INET, addr.c_str(), &v4) == 1;
  const bool is6 = !is4 && inet_pton(AF_INET6, addr.c_str(), &v6) == 1;
  if (!is4 && !is6) return "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || !i->ifa_netmask || !(i->ifa_flags & IFF_UP)) continue;
    if (is4 && i->ifa_addr->sa_family == AF_INET) {
      const auto* a = &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
      const auto* m = &reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr;
      if (SameSubnet(reinterpret_cast<const unsigned char*>(a), reinterpret_cast<const unsigned char*>(&v4),
                     reinterpret_cast<const unsigned char*>(m), 4))
        found = i->ifa_name;
    } else if (is6 && i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      const auto* m = &reinterpret_cast<const sockaddr_in6*>(i->ifa_netmask)->sin6_addr;
      if (SameSubnet(a->s6_addr, v6.s6_addr, m->s6_addr, 16)) found = i->ifa_name;
    }
  }
  freeifaddrs(list);
  return found;
}

SocketIfname ChooseSocketIfname(const char* user, bool single_host, const std::string& master_addr) {
  if (user && *user) return {user, "user"};
  if (single_host) {
    const std::string lo = InterfaceForAddress("127.0.0.1");
    if (!lo.empty()) return {lo, "loopback"};
  }
  const std::string master = InterfaceForAddress(master_addr);
  if (!master.empty()) return {master, "master_addr"};
  return {"", "nccl-default"};
}

}  // namespace ddpbench
