// The rendezvous part of parsing the launch's flags: where this node's rounds come from
// (LaunchConfig::topology), the service it joins or hosts, and where its workers meet.
#pragma once

#include "absl/status/status.h"
#include "launcher/host_probe.h"
#include "launcher/launch_config.h"
#include "launcher/launch_flags.h"

namespace dtrun {

// Fills c.topology, the run id, the store's address and port, c.rdzv and the service's endpoint;
// c.min_nodes, c.max_nodes, c.rdzv_conf and c.agent.max_restarts must be set. Errors name the flag.
absl::Status FillTopology(const RawFlags& f, const HostProbe& host, LaunchConfig& c);

}  // namespace dtrun
