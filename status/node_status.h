// What `dtrun status`, the metrics endpoint and the progress line show: one row per worker, built
// by its node's agent about once a second from the workers' progress reports and /proc (and NVML
// when a GPU driver is present). Plain values: the agent fills them, the rendezvous service keeps
// each node's latest, `dtrun status` prints them. A number that is not known is negative.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dtrun::status {

// One step's wait inside the gradient all-reduce, as a rank reported it (docs/DESIGN.md,
// "Stragglers"): the last rank to arrive waits least.
struct StepWait {
  int64_t step = 0;
  double wait_s = 0;
  double step_s = 0;  // the step's duration on that rank
};

struct RankStatus {
  int global_rank = -1;
  int local_rank = 0;
  int64_t pid = 0;
  std::string state;             // "running", "succeeded", "failed", "hung", "stopping"
  int64_t step = -1;             // the last step it reported
  double steps_per_s = -1;
  double samples_per_s = -1;
  std::string section;           // the innermost open section ("" if none)
  double section_age_s = -1;     // since that section began
  double heartbeat_age_s = -1;   // since its last report
  double cpu_percent = -1;       // over the last sample interval; 100 = one core
  int64_t rss_bytes = -1;
  double gpu_util_percent = -1;  // of the GPU it runs on (NVML, or the KFD's files)
  int64_t gpu_mem_bytes = -1;    // what it holds on that GPU (NVML, or the KFD's files)
  int64_t snapshot_step = -1;    // its newest in-memory snapshot (docs/DESIGN.md, "Snapshots")
  int64_t snapshot_bytes = -1;   // and that snapshot's size
  int64_t buddy_step = -1;       // the newest step of it that the node's buddy holds a copy of
  int64_t kept_step = -1;        // the newest step of it written to --snapshot-dir
  bool warm = false;             // its program may be started parked (docs/DESIGN.md, "Warm workers")
  double sync_wait_s = -1;       // its mean wait in the gradient all-reduce over its recent steps
  std::vector<StepWait> waits;   // the steps it reported since the node's previous summary, in order
};

// What the rendezvous found holding the job back (straggler/straggler_watch.h).
enum class StragglerKind {
  kRank,  // one rank (`global_rank`)
  kNode,  // the ranks of one node (`host`); global_rank is -1
  kLink,  // the collective's path, near `host`: the rank that arrives last (or -1: its node's
          // ranks) waits least because it finished the last step late, not because it is slow
};

// The rank, node or link the job judged to be holding everyone back.
struct StragglerStatus {
  int global_rank = -1;   // -1: a whole node (`host`), no one rank of it
  std::string host;       // the node that runs it, as messages name nodes ("node 1 (vm, 198.18.0.2)")
  int last_in = 0;        // steps of the window in which it arrived last by the margin
  int window = 0;
  double cost_share = 0;  // the wait it caused every rank, as a share of the step time
  int64_t named_at_step = -1;  // the step whose judgement first named it (-1: not known)
  StragglerKind kind = StragglerKind::kRank;
};
// "rank", "node", "link": the event log's and the status JSON's word for it.
std::string StragglerKindName(StragglerKind kind);
absl::StatusOr<StragglerKind> StragglerKindFromName(std::string_view name);

struct NodeStatus {
  std::string node_id;            // the rendezvous's id for the node ("" on a single node)
  std::string host;
  int nproc = 0;
  int64_t round = -1;
  int restarts = 0;               // restarts the job has used
  int64_t time_unix_ms = 0;       // when the agent built this
  std::optional<int64_t> total_steps;  // when the job announced it
  std::string buddy;              // the agent holding copies of its snapshots, "host:port" ("": none)
  std::string failure_domain;     // its --failure-domain, as the rendezvous knows it ("": none said)
  std::vector<RankStatus> ranks;  // by local rank
};

// The whole job, as `dtrun status` shows it.
struct JobStatus {
  std::string run_id;
  std::string phase;              // rendezvous phase: "forming", "running", "succeeded", ...
  int64_t round = -1;
  int restarts_used = 0;
  std::vector<NodeStatus> nodes;  // a node that has not pushed a summary yet has no ranks
  std::optional<StragglerStatus> straggler;
};

// "rank 3 on node 1 (vm, 198.18.0.2) arrived last at the gradient all-reduce in 17 of the last 20 steps, costing every
// rank 23% of the step time": how every reader names a straggler.
std::string DescribeStraggler(const StragglerStatus& s);

// Ages (section, heartbeat) as of `now_unix_ms` instead of when each node built its summary.
void AgeTo(JobStatus& job, int64_t now_unix_ms);

// The most rows one node's summary may hold (as many as --nproc-per-node allows).
inline constexpr size_t kMaxRanksPerNode = 1024;

// A summary from outside (a node's push to the service, a snapshot file) is checked before it is
// kept: at most `max_ranks` rows, short printable strings, finite numbers. InvalidArgument names
// the field.
inline constexpr size_t kMaxStatusString = 64;
inline constexpr size_t kMaxWaitsPerRank = 64;
absl::Status CheckNodeStatus(const NodeStatus& node, size_t max_ranks);
// The same for a named straggler: a rank (or -1 with a node's label), a short printable label,
// last_in within a positive window, a cost share in [0, 1].
absl::Status CheckStraggler(const StragglerStatus& s);

// A summary not yet sent is replaced by `newer`: each rank's waits in `older` (same local rank) that
// come before `newer`'s are put in front of them, and the newest kMaxWaitsPerRank kept.
void CarryWaitsOver(const NodeStatus& older, NodeStatus& newer);

// The slowest rank's step (the job's step), or -1 when no rank reported one.
int64_t JobStep(const NodeStatus& node);
double SamplesPerSecond(const NodeStatus& node);  // the sum over ranks that report it (-1: none)
double StepsPerSecond(const NodeStatus& node);    // the slowest reporting rank's (-1: none)

}  // namespace dtrun::status
