// Test support: plain TCP sockets on 127.0.0.1, for tests that talk to a port raw (hostile
// clients, HTTP by hand) or need one that is taken.
#pragma once

#include "base/unique_fd.h"

namespace dtrun::testing {

// A connection to 127.0.0.1:`port`; the test fails (and the fd is invalid) if it cannot connect.
// Blocking, no timeouts: callers that read set their own bound.
UniqueFd ConnectLoopback(int port);
// A socket listening on a free loopback port, held for as long as the fd lives; the port in `port`.
UniqueFd ListenOnFreeLoopbackPort(int& port);

}  // namespace dtrun::testing
