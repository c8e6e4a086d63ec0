// "HOST[:PORT]" endpoints as users write them (--rdzv-endpoint, --endpoint) and as the launcher
// hands them to the rendezvous client: a name, an IPv4 address, or an IPv6 address in brackets.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace dtrun {

// Splits `value` into host and port; `default_port` where it names none. IPv6 hosts come back
// without their brackets. InvalidArgument, naming `value`, for a missing host or ']' or a port
// outside 0-65535.
absl::StatusOr<std::pair<std::string, int>> ParseEndpoint(const std::string& value, int default_port);

// The inverse: "host:port", an IPv6 host (one with a ':') in brackets, as gRPC and users write it.
std::string FormatEndpoint(const std::string& host, int port);

}  // namespace dtrun
