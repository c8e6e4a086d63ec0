// libFuzzer: the status snapshot `dtrun status` reads from an agent's private directory is read as
// untrusted JSON. Any bytes: nothing throws or crashes; what is accepted passes the bounds, renders
// as a table and as Prometheus text, and survives a round trip through its JSON form.
#include <cstddef>
#include <cstdint>

#include "nlohmann/json.hpp"
#include "status/prometheus.h"
#include "status/status_json.h"
#include "status/status_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtrun::status;
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  absl::StatusOr<JobStatus> job = JobStatusFromJson(j, 8);
  if (!job.ok()) return 0;
  for (const NodeStatus& node : job->nodes) {
    if (!CheckNodeStatus(node, 8).ok()) __builtin_trap();
    (void)RenderPrometheus(job->run_id, node, AgentCounters{});
  }
  AgeTo(*job, 1'000'000'000'000);
  (void)RenderTable(*job);
  const std::string text = ToJson(*job).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  absl::StatusOr<JobStatus> again = JobStatusFromJson(nlohmann::json::parse(text, nullptr, false), 8);
  if (!again.ok()) __builtin_trap();
  return 0;
}
