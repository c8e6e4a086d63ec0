// Finds the network interface that carries an address, so workers' Gloo/NCCL sockets bind to
// the node's real address instead of whatever the hostname resolves to (often loopback).
#pragma once

#include <optional>
#include <string>

namespace dtrun {

// The name of the interface holding `address` (a literal IPv4/IPv6 address or a host name that
// resolves to one of this host's addresses), or nullopt.
std::optional<std::string> InterfaceWithAddress(const std::string& address);

}  // namespace dtrun

namespace dtrun {

// The local address this host would use to reach `host` (a UDP connect, no packet is sent), or
// nullopt if `host` does not resolve or is unreachable.
std::optional<std::string> LocalAddressFacing(const std::string& host, int port);

}  // namespace dtrun
