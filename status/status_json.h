// The stable JSON form of a job's status (`dtrun status --json`, schema "dtrun.status/v1" in
// docs/DESIGN.md, "dtrun status"), and of the snapshot an agent keeps for the local `dtrun status`.
// Unknown numbers are null. Fields are only ever added.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "status/node_status.h"

namespace dtrun::status {

inline constexpr char kStatusSchema[] = "dtrun.status/v1";

nlohmann::json ToJson(const JobStatus& job);
// Parses what ToJson wrote (from a file: untrusted). Each node is checked with CheckNodeStatus
// against `max_ranks_per_node`; unknown fields are ignored.
absl::StatusOr<JobStatus> JobStatusFromJson(const nlohmann::json& j, size_t max_ranks_per_node);

}  // namespace dtrun::status
