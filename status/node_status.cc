#include "status/node_status.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrun::status {
namespace {

bool Printable(const std::string& s) {
  return s.size() <= kMaxStatusString &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

bool Sane(double v) { return std::isfinite(v) && v >= -1 && v < 1e15; }

absl::Status CheckRank(const RankStatus& r, size_t i) {
  auto bad = [&](const char* field) {
    return absl::InvalidArgumentError(absl::StrCat("status row ", i, ": field '", field, "' is out of range"));
  };
  if (!Printable(r.state)) return bad("state");
  if (!Printable(r.section)) return bad("section");
  const struct {
    const char* name;
    int64_t value, min;
  } counts[] = {{"global_rank", r.global_rank, -1}, {"local_rank", r.local_rank, 0}, {"pid", r.pid, 0},
                {"step", r.step, -1},               {"rss_bytes", r.rss_bytes, -1}, {"gpu_mem_bytes", r.gpu_mem_bytes, -1},
                {"snapshot_step", r.snapshot_step, -1}, {"snapshot_bytes", r.snapshot_bytes, -1},
                {"buddy_step", r.buddy_step, -1}, {"kept_step", r.kept_step, -1}};
  for (const auto& c : counts) {
    if (c.value < c.min) return bad(c.name);
  }
  const std::pair<const char*, double> numbers[] = {
      {"steps_per_s", r.steps_per_s},         {"samples_per_s", r.samples_per_s},
      {"section_age_s", r.section_age_s},     {"heartbeat_age_s", r.heartbeat_age_s},
      {"cpu_percent", r.cpu_percent},         {"gpu_util_percent", r.gpu_util_percent}};
  for (const auto& [name, v] : numbers) {
    if (!Sane(v)) return bad(name);
  }
  if (!Sane(r.sync_wait_s)) return bad("sync_wait_s");
  if (r.waits.size() > kMaxWaitsPerRank) return bad("waits");
  for (const StepWait& w : r.waits) {
    if (w.step < 0 || !Sane(w.wait_s) || !Sane(w.step_s) || w.wait_s < 0 || w.step_s < 0) return bad("waits");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckNodeStatus(const NodeStatus& node, size_t max_ranks) {
  if (node.ranks.size() > max_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("status has ", node.ranks.size(), " rows for a node of ", max_ranks, " worker(s)"));
  }
  if (!Printable(node.host)) return absl::InvalidArgumentError("status: field 'host' is out of range");
  if (!Printable(node.buddy)) return absl::InvalidArgumentError("status: field 'buddy' is out of range");
  if (!Printable(node.failure_domain)) {
    return absl::InvalidArgumentError("status: field 'failure_domain' is out of range");
  }
  if (node.round < -1 || node.restarts < 0 || node.time_unix_ms < 0 || (node.total_steps && *node.total_steps < 0)) {
    return absl::InvalidArgumentError("status: round, restarts, time or total steps out of range");
  }
  for (size_t i = 0; i < node.ranks.size(); ++i) {
    DT_RETURN_IF_ERROR(CheckRank(node.ranks[i], i));
  }
  return absl::OkStatus();
}

absl::Status CheckStraggler(const StragglerStatus& s) {
  const bool who = s.kind == StragglerKind::kRank   ? s.global_rank >= 0
                   : s.kind == StragglerKind::kNode ? s.global_rank == -1 && !s.host.empty()
                   : s.kind == StragglerKind::kLink ? s.global_rank >= 0 || (s.global_rank == -1 && !s.host.empty())
                                                    : false;
  const bool sane = who && Printable(s.host) && s.window > 0 && s.last_in >= 0 && s.last_in <= s.window &&
                    std::isfinite(s.cost_share) && s.cost_share >= 0 && s.cost_share <= 1 && s.named_at_step >= -1;
  return sane ? absl::OkStatus() : absl::InvalidArgumentError("status: field 'straggler' is out of range");
}

std::string StragglerKindName(StragglerKind kind) {
  switch (kind) {
    case StragglerKind::kRank: return "rank";
    case StragglerKind::kNode: return "node";
    case StragglerKind::kLink: return "link";
  }
  return "?";
}

absl::StatusOr<StragglerKind> StragglerKindFromName(std::string_view name) {
  for (StragglerKind k : {StragglerKind::kRank, StragglerKind::kNode, StragglerKind::kLink}) {
    if (name == StragglerKindName(k)) return k;
  }
  return absl::InvalidArgumentError("status: field 'straggler.kind' is not rank, node or link");
}

std::string DescribeStraggler(const StragglerStatus& s) {
  const std::string who = s.global_rank < 0 ? absl::StrCat("the ranks of ", s.host)
                                            : absl::StrCat("rank ", s.global_rank, s.host.empty() ? "" : " on ", s.host);
  const std::string last = absl::StrCat(" arrived last at the gradient all-reduce in ", s.last_in, " of the last ",
                                        s.window, " steps");
  const std::string cost = absl::StrCat(static_cast<int>(std::lround(s.cost_share * 100)), "% of the step time");
  switch (s.kind) {
    case StragglerKind::kRank: return absl::StrCat(who, last, ", costing every rank ", cost);
    case StragglerKind::kNode: return absl::StrCat(who, last, " (a slow node), costing every rank ", cost);
    case StragglerKind::kLink:
      return absl::StrCat("a slow link, likely into ", s.host, ": ", who, last,
                          ", but the other ranks waited unevenly, which one late rank does not cause (the all-reduce "
                          "is slow along its path, costing about ", cost, "); no rank is blamed");
  }
  return "";
}

void CarryWaitsOver(const NodeStatus& older, NodeStatus& newer) {
  for (RankStatus& r : newer.ranks) {
    auto old = std::find_if(older.ranks.begin(), older.ranks.end(),
                            [&](const RankStatus& o) { return o.local_rank == r.local_rank; });
    if (old == older.ranks.end() || old->waits.empty()) continue;
    const int64_t before = r.waits.empty() ? INT64_MAX : r.waits.front().step;
    std::vector<StepWait> merged;
    for (const StepWait& w : old->waits) {
      if (w.step < before) merged.push_back(w);
    }
    merged.insert(merged.end(), r.waits.begin(), r.waits.end());
    if (merged.size() > kMaxWaitsPerRank) merged.erase(merged.begin(), merged.end() - kMaxWaitsPerRank);
    r.waits = std::move(merged);
  }
}

int64_t JobStep(const NodeStatus& node) {
  int64_t slowest = -1;
  for (const RankStatus& r : node.ranks) {
    if (r.step >= 0 && (slowest < 0 || r.step < slowest)) slowest = r.step;
  }
  return slowest;
}

double SamplesPerSecond(const NodeStatus& node) {
  double sum = -1;
  for (const RankStatus& r : node.ranks) {
    if (r.samples_per_s >= 0) sum = std::max(sum, 0.0) + r.samples_per_s;
  }
  return sum;
}

double StepsPerSecond(const NodeStatus& node) {
  double slowest = -1;
  for (const RankStatus& r : node.ranks) {
    if (r.steps_per_s >= 0 && (slowest < 0 || r.steps_per_s < slowest)) slowest = r.steps_per_s;
  }
  return slowest;
}

void AgeTo(JobStatus& job, int64_t now_unix_ms) {
  for (NodeStatus& node : job.nodes) {
    const double later = std::max<int64_t>(0, now_unix_ms - node.time_unix_ms) / 1000.0;
    for (RankStatus& r : node.ranks) {
      if (r.section_age_s >= 0) r.section_age_s += later;
      if (r.heartbeat_age_s >= 0) r.heartbeat_age_s += later;
    }
  }
}

}  // namespace dtrun::status
