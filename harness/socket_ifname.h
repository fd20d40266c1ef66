// Which network interface NCCL's bootstrap (and its socket transport) listens
// on. Left to itself NCCL picks the first interface that is up and not
// loopback or docker, so ranks that ddpbench spawned on one host would listen
// on the host's public address although every peer is local. ddpbench sets
// NCCL_SOCKET_IFNAME where the rendezvous store listens, unless the user set
// it: the loopback interface for a single-host run, MASTER_ADDR's interface
// (the one whose subnet holds it) for a run across hosts. The row's
// nccl_socket_ifname says what was used and why.
#pragma once

#include <string>

namespace ddpbench {

struct SocketIfname {
  std::string name;    // "" : none chosen (NCCL's own choice stands)
  std::string source;  // user|loopback|master_addr|nccl-default
  std::string Describe() const { return name.empty() ? source : name + " (" + source + ")"; }
};

// The choice for this process; `user` is NCCL_SOCKET_IFNAME's value as set
// by the user (nullptr or "" when unset). Reads the host's interfaces.
SocketIfname ChooseSocketIfname(const char* user, bool single_host, const std::string& master_addr);

// The interface holding `address` in its subnet (IPv4 or IPv6 literal, or
// "localhost"); "" when none does or the address is not a literal.
std::string InterfaceForAddress(const std::string& address);

}  // namespace ddpbench
