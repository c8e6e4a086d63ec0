// Whether a TCP port is free to listen on, asked before a library that would log its own failed
// bind (gRPC does, as an error) is given the port.
#pragma once

#include <string>

namespace dtrun {

// True if a listening socket cannot bind `host`:`port` now because another socket holds it
// (EADDRINUSE). `host` is a name or a numeric address (its first address is tried). Any other
// failure says false and is left to the real bind to report. Another process may still take the
// port between this probe and that bind.
bool TcpPortTaken(const std::string& host, int port);

}  // namespace dtrun
