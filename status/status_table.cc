#include "status/status_table.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dtrun::status {
namespace {

std::string Num(double v, int decimals = 1) { return v < 0 ? "-" : absl::StrFormat("%.*f", decimals, v); }

std::string Int(int64_t v) { return v < 0 ? "-" : absl::StrCat(v); }

// "failure domains: leaf0 (2 nodes), leaf1 (2 nodes)\n", so a reader sees where buddy copies can go;
// "" when no node said one. The first kShownDomains by name, then how many more.
std::string DomainsLine(const JobStatus& job) {
  constexpr size_t kShownDomains = 8;
  std::map<std::string, int> nodes;
  bool any = false;
  for (const NodeStatus& n : job.nodes) {
    ++nodes[n.failure_domain];
    any |= !n.failure_domain.empty();
  }
  if (!any) return "";
  std::vector<std::string> parts;
  for (const auto& [domain, count] : nodes) {
    if (parts.size() == kShownDomains) {
      parts.push_back(absl::StrCat("and ", nodes.size() - kShownDomains, " more"));
      break;
    }
    parts.push_back(absl::StrCat(domain.empty() ? "(none said)" : domain.substr(0, 32), " (", count,
                                 count == 1 ? " node)" : " nodes)"));
  }
  return absl::StrCat("failure domains: ", absl::StrJoin(parts, ", "), "\n");
}

}  // namespace

std::string RenderHeader(const JobStatus& job) {
  int ranks = 0;
  int64_t step = -1;
  std::optional<int64_t> total;
  for (const NodeStatus& n : job.nodes) {
    ranks += static_cast<int>(n.ranks.size());
    const int64_t s = JobStep(n);
    if (s >= 0 && (step < 0 || s < step)) step = s;
    if (n.total_steps) total = n.total_steps;
  }
  std::string progress = step < 0 ? "" : absl::StrCat(", step ", step, total ? absl::StrCat("/", *total) : "");
  return absl::StrCat(
      "run ", job.run_id, ": ", job.phase, ", round ", job.round < 0 ? std::string("-") : absl::StrCat(job.round), ", ",
      job.restarts_used, " restart(s) used, ", job.nodes.size(), " node(s), ", ranks, " rank(s)", progress, "\n",
      DomainsLine(job), job.straggler ? absl::StrCat("straggler: ", DescribeStraggler(*job.straggler), "\n") : "");
}

namespace {

// A rank's mean wait in the gradient all-reduce; the straggler's is marked: it waits least.
std::string SyncWait(const RankStatus& r, const JobStatus& job) {
  if (r.sync_wait_s < 0) return "-";
  const bool named = job.straggler && job.straggler->global_rank == r.global_rank;
  return absl::StrFormat("%.1fms%s", r.sync_wait_s * 1000, named ? "*" : "");
}

}  // namespace

std::string HumanBytes(int64_t bytes) {
  if (bytes < 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string HumanSeconds(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "-";
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
}

std::string RenderTable(const JobStatus& job) { return RenderHeader(job) + RenderRows(job); }

std::string RenderRows(const JobStatus& job) {
  std::string out =
      absl::StrFormat("%-16s %5s %5s %8s %-9s %8s %8s %10s %-12s %8s %8s %6s %10s %5s %10s %8s %10s %-21s %10s %8s %10s\n", "HOST",
                      "RANK", "LOCAL", "PID", "STATE", "STEP", "STEPS/S", "SAMPLES/S", "SECTION", "SEC_AGE", "HB_AGE",
                      "CPU%", "RSS", "GPU%", "GPU_MEM", "SNAP", "SNAP_SIZE", "BUDDY", "BUDDY_SNAP", "KEPT", "SYNC_WAIT");
  for (const NodeStatus& n : job.nodes) {
    if (n.ranks.empty()) {
      out += absl::StrFormat("%-16s %5s %5s %8s %-9s (no report from this node yet)\n", n.host.substr(0, 16), "-", "-",
                             "-", "-");
    }
    for (const RankStatus& r : n.ranks) {
      out += absl::StrFormat("%-16s %5s %5d %8d %-9s %8s %8s %10s %-12s %8s %8s %6s %10s %5s %10s %8s %10s %-21s %10s %8s %10s\n",
                             n.host.substr(0, 16), Int(r.global_rank), r.local_rank, r.pid, r.state.substr(0, 9),
                             Int(r.step), Num(r.steps_per_s, 2), Num(r.samples_per_s),
                             r.section.empty() ? "-" : r.section.substr(0, 12), HumanSeconds(r.section_age_s),
                             HumanSeconds(r.heartbeat_age_s), Num(r.cpu_percent, 0), HumanBytes(r.rss_bytes),
                             Num(r.gpu_util_percent, 0), HumanBytes(r.gpu_mem_bytes), Int(r.snapshot_step),
                             HumanBytes(r.snapshot_bytes), n.buddy.empty() ? "-" : n.buddy.substr(0, 21),
                             Int(r.buddy_step), Int(r.kept_step), SyncWait(r, job));
    }
  }
  return out;
}

}  // namespace dtrun::status
