// The agent's numbers in Prometheus' text exposition format (version 0.0.4), as the metrics
// endpoint serves them. Metric names and labels: docs/DESIGN.md, "Metrics endpoint".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "status/node_status.h"

namespace dtrun::status {

// Counters the agent keeps over the whole job (not per attempt).
struct AgentCounters {
  int64_t rounds = 0;           // rounds this node started workers for
  int64_t hangs = 0;            // hangs declared on this node
  int64_t worker_failures = 0;  // workers of this node that failed
  int64_t oom_kills = 0;        // of those, the ones the kernel's out-of-memory killer ended
};

// `straggler`: the rank the job judged to hold everyone back, if any (the same on every node).
std::string RenderPrometheus(const std::string& run_id, const NodeStatus& node, const AgentCounters& counters,
                             const std::optional<StragglerStatus>& straggler = std::nullopt);

}  // namespace dtrun::status
