// The listening socket of a TCPStore that ddpbench serves. c10d's server binds
// the wildcard address (TCPStoreOptions has no bind address), so anyone who
// can reach the host could write into the rendezvous; ddpbench instead binds
// the socket itself to one address and hands it to c10d (masterListenFd).
#pragma once

#include <string>

namespace ddpbench {

struct StoreSocket {
  int fd = -1;       // listening; c10d's server takes it over
  int port = 0;      // the bound port (the kernel's pick when asked for 0)
  std::string bind;  // the address bound, "*" when every interface
};

// Listens on `host`:`port` (port 0: any free port), host being a name or a
// numeric address of this machine. With `fallback_to_all`, listens on every
// interface instead (bind "*") when `host` is not an address of this machine
// (behind NAT, a name resolving elsewhere), or when it resolves to loopback
// here but `remote_peers` must reach it (a hostname that /etc/hosts maps to
// 127.0.1.1); otherwise throws std::runtime_error naming the address.
StoreSocket ListenForStore(const std::string& host, int port, bool fallback_to_all, bool remote_peers = false);

}  // namespace ddpbench
