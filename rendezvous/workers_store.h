// Where a round's workers find their TCPStore, as the agent tells them (MASTER_ADDR/MASTER_PORT).
#pragma once

#include <string>

#include "rendezvous/rendezvous_state.h"

namespace dtrun::rdzv {

// An assignment that names no workers' store (RendezvousOptions::workers_store_at_endpoint: the
// store shares the service's endpoint) gets the host and port of `endpoint`, where this node
// reaches the service; a node that names the host differently from the others (another DNS name,
// an address behind NAT) still finds it. An endpoint that does not parse (the launcher builds it,
// so it does) leaves the assignment as it is.
void PlaceWorkersStoreAtEndpoint(Assignment& assignment, const std::string& endpoint);

// What the service says when `round` has more workers than its store takes (`capacity`, 0: not
// known): the others are refused when they connect, so it is said before they start, with the
// fix. "" when the round fits.
std::string StoreTooSmallWarning(int64_t round, int64_t world_size, int64_t capacity);

}  // namespace dtrun::rdzv
