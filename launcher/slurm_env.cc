#include "launcher/slurm_env.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "launcher/slurm_hostlist.h"
#include "rendezvous/rendezvous_state.h"

namespace dtrun {
namespace {

const std::string* Find(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

using Env = std::map<std::string, std::string>;

// A count Slurm set, and the variable it came from.
struct Count {
  int value;
  std::string from;
};

// The first of `names` that is set, as a non-negative integer.
absl::StatusOr<std::optional<Count>> FirstCount(const Env& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const std::string* v = Find(env, name);
    if (!v) continue;
    int n = 0;
    if (!absl::SimpleAtoi(*v, &n) || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, "=", v->substr(0, 64), " is not a count Slurm would set"));
    }
    return std::optional<Count>(Count{n, name});
  }
  return std::optional<Count>();
}

// One dtrun per node: it starts the node's workers itself.
absl::Status CheckOneTaskPerNode(const Env& env) {
  const std::string* tasks = Find(env, "SLURM_STEP_TASKS_PER_NODE");
  absl::StatusOr<std::vector<int>> counts = tasks ? ExpandSlurmCounts(*tasks) : std::vector<int>{};
  if (!counts.ok()) return absl::InvalidArgumentError(absl::StrCat("SLURM_STEP_TASKS_PER_NODE: ", counts.status().message()));
  int most = 1;
  for (int c : *counts) most = std::max(most, c);
  const std::string* local = Find(env, "SLURM_LOCALID");
  if (most == 1 && (!local || *local == "0")) return absl::OkStatus();
  const std::string* host = Find(env, "SLURMD_NODENAME");
  return absl::InvalidArgumentError(absl::StrCat(
      "srun started ", most > 1 ? absl::StrCat(most) : std::string("several"), " dtrun tasks on ",
      host ? *host : std::string("this node"),
      tasks ? absl::StrCat(" (SLURM_STEP_TASKS_PER_NODE=", tasks->substr(0, 64), ")") : "",
      "; dtrun starts the workers itself: run one dtrun per node (srun --ntasks-per-node=1 dtrun "
      "--nproc-per-node N ...)"));
}

// In a step: how many nodes, this one's rank (its task's: one task per node), the master (the
// step's first node) and the job's port.
absl::Status ReadNodes(const Env& env, SlurmLaunch& s) {
  DT_ASSIGN_OR_RETURN(std::optional<Count> nodes,
                      FirstCount(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"}));
  if (!nodes || nodes->value < 1) return absl::OkStatus();
  s.nnodes = nodes->value;
  s.source["--nnodes"] = nodes->from;
  if (*s.nnodes == 1) return absl::OkStatus();
  DT_ASSIGN_OR_RETURN(std::optional<Count> rank, FirstCount(env, {"SLURM_PROCID", "SLURM_NODEID"}));
  if (rank) {
    s.node_rank = rank->value;
    s.source["--node-rank"] = rank->from;
  }
  const char* list_var = Find(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  if (const std::string* list = Find(env, list_var)) {
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(*list);
    if (!hosts.ok()) return absl::InvalidArgumentError(absl::StrCat(list_var, ": ", hosts.status().message()));
    if (!hosts->empty()) {
      s.master_addr = hosts->front();
      s.source["--master-addr"] = absl::StrCat("the first host of ", list_var);
    }
  }
  s.master_port = SlurmJobPort(s.job_id);
  s.source["--master-port"] = "SLURM_JOB_ID";
  return absl::OkStatus();
}

// The node's GPUs, else the job's tasks on this node (sbatch --ntasks-per-node=8), not the step's
// single dtrun task.
absl::Status ReadWorkersPerNode(const Env& env, SlurmLaunch& s) {
  DT_ASSIGN_OR_RETURN(std::optional<Count> gpus, FirstCount(env, {"SLURM_GPUS_ON_NODE"}));
  if (gpus && gpus->value > 0) {
    s.nproc_per_node = gpus->value;
    s.source["--nproc-per-node"] = "SLURM_GPUS_ON_NODE";
    return absl::OkStatus();
  }
  const std::string* tasks = Find(env, "SLURM_TASKS_PER_NODE");
  if (!tasks) return absl::OkStatus();
  absl::StatusOr<std::vector<int>> counts = ExpandSlurmCounts(*tasks);
  if (!counts.ok()) return absl::InvalidArgumentError(absl::StrCat("SLURM_TASKS_PER_NODE: ", counts.status().message()));
  absl::StatusOr<std::optional<Count>> node = FirstCount(env, {"SLURM_NODEID"});
  const size_t at = node.ok() && *node ? static_cast<size_t>((*node)->value) : 0;
  if (at < counts->size() && (*counts)[at] > 0) {
    s.nproc_per_node = (*counts)[at];
    s.source["--nproc-per-node"] = "SLURM_TASKS_PER_NODE";
  }
  return absl::OkStatus();
}

// Under topology/tree Slurm names the switches from the top one down to the node's leaf switch, then
// the node: SLURM_TOPOLOGY_ADDR "top.leaf3.n17" with SLURM_TOPOLOGY_ADDR_PATTERN
// "switch.switch.node". Switch names are unique in a cluster, so the leaf's alone names the domain.
// Anything else (no tree, a pattern it does not follow) says nothing.
void ReadFailureDomain(const Env& env, SlurmLaunch& s) {
  const std::string* addr = Find(env, "SLURM_TOPOLOGY_ADDR");
  const std::string* pattern = Find(env, "SLURM_TOPOLOGY_ADDR_PATTERN");
  if (!addr || !pattern) return;
  const std::vector<absl::string_view> kinds = absl::StrSplit(*pattern, '.');
  const std::vector<absl::string_view> parts = absl::StrSplit(*addr, '.');
  // A node name with dots is several parts after the switches.
  if (kinds.size() < 2 || kinds.back() != "node" || kinds[kinds.size() - 2] != "switch" ||
      parts.size() < kinds.size()) {
    return;
  }
  const std::string leaf(parts[kinds.size() - 2]);
  if (leaf.empty() || !rdzv::IsFailureDomainName(leaf)) return;
  s.failure_domain = leaf;
  s.source["--failure-domain"] = "the leaf switch in SLURM_TOPOLOGY_ADDR";
}

}  // namespace

int SlurmJobPort(const std::string& job_id) {
  uint64_t id = 0;
  if (!absl::SimpleAtoi(job_id, &id)) {
    for (char c : job_id) id = id * 31 + static_cast<unsigned char>(c);
  }
  return 20000 + static_cast<int>(id % 10000);
}

absl::StatusOr<std::vector<int>> ExpandSlurmCounts(const std::string& value) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    int count = 0, times = 1;
    absl::string_view n = part;
    if (size_t open = part.find("(x"); open != absl::string_view::npos) {
      absl::string_view rep = part.substr(open + 2);
      if (!absl::ConsumeSuffix(&rep, ")") || !absl::SimpleAtoi(rep, &times) || times < 1 || times > 1 << 16) {
        return absl::InvalidArgumentError(absl::StrCat("\"", value.substr(0, 64), "\" is not a Slurm count list"));
      }
      n = part.substr(0, open);
    }
    if (!absl::SimpleAtoi(n, &count) || count < 0 || out.size() + times > (1 << 16)) {
      return absl::InvalidArgumentError(absl::StrCat("\"", value.substr(0, 64), "\" is not a Slurm count list"));
    }
    out.insert(out.end(), static_cast<size_t>(times), count);
  }
  return out;
}

absl::StatusOr<std::optional<SlurmLaunch>> ReadSlurmLaunch(const std::map<std::string, std::string>& env) {
  const std::string* job = Find(env, "SLURM_JOB_ID");
  if (!job) job = Find(env, "SLURM_JOBID");
  if (!job) return std::optional<SlurmLaunch>();
  SlurmLaunch s;
  s.job_id = *job;
  const std::string* step = Find(env, "SLURM_STEP_ID");
  s.in_step = step && *step != "batch" && *step != "extern" && Find(env, "SLURM_STEP_NODELIST");
  if (s.in_step) {
    DT_RETURN_IF_ERROR(CheckOneTaskPerNode(env));
    DT_RETURN_IF_ERROR(ReadNodes(env, s));
  }
  s.run_id = absl::StrCat("slurm-", s.job_id, s.in_step ? absl::StrCat(".", *step) : "");
  s.source["--rdzv-id"] = s.in_step ? "SLURM_JOB_ID.SLURM_STEP_ID" : "SLURM_JOB_ID";
  DT_RETURN_IF_ERROR(ReadWorkersPerNode(env, s));
  ReadFailureDomain(env, s);
  return std::make_optional(std::move(s));
}

}  // namespace dtrun
