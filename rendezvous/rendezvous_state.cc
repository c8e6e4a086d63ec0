#include "rendezvous/rendezvous_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrun::rdzv {

std::string PhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kForming: return "FORMING";
    case JobPhase::kRunning: return "RUNNING";
    case JobPhase::kSucceeded: return "SUCCEEDED";
    case JobPhase::kFailed: return "FAILED";
    case JobPhase::kKilled: return "KILLED";
  }
  return "?";
}

std::string NodeLabel(const NodeInfo& node) {
  const bool has_addr = !node.store_addr.empty() && node.store_addr != node.host;
  if (node.requested_rank >= 0) {
    return absl::StrCat("node ", node.requested_rank, " (", node.host, has_addr ? ", " + node.store_addr : "", ")");
  }
  return absl::StrCat("node ", node.host, has_addr ? " (" + node.store_addr + ")" : "");
}

RendezvousState::RendezvousState(RendezvousOptions options, TimePoint now)
    : options_(std::move(options)), forming_since_(now) {}

bool RendezvousState::Terminal() const {
  return phase_ == JobPhase::kSucceeded || phase_ == JobPhase::kFailed || phase_ == JobPhase::kKilled;
}

absl::StatusOr<std::string> RendezvousState::Join(const NodeInfo& node, TimePoint now) {
  if (Terminal()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is already over (", PhaseName(phase_), "); start a new run id"));
  }
  if (options_.static_ranks) {
    if (node.requested_rank < 0 || node.requested_rank >= options_.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("--node-rank ", node.requested_rank,
                                                     " is out of range; use 0..", options_.max_nodes - 1));
    }
    for (const auto& [id, n] : nodes_) {
      if (n.info.requested_rank == node.requested_rank) {
        return absl::AlreadyExistsError(absl::StrCat("node rank ", node.requested_rank,
                                                     " has already joined from ", NodeLabel(n.info),
                                                     "; give every node its own --node-rank"));
      }
    }
  }
  std::string id = absl::StrCat("node", next_seq_, "-", node.host);
  Node& n = nodes_[id];
  n.info = node;
  n.join_seq = next_seq_++;
  n.lease_expiry = now + options_.lease();
  n.last_contact = now;
  if (node.requested_rank >= 0) last_known_[node.requested_rank] = node;
  Touch(id);
  if (phase_ == JobPhase::kRunning) {
    bool room = !options_.static_ranks && static_cast<int>(members_.size()) < options_.max_nodes;
    if (room) {
      EndRound(absl::StrCat(NodeLabel(node), " joined; re-forming with it"), now);
    } else {
      n.role = NodeRole::kSpare;
      Touch(id);
    }
  } else {
    MaybeFormRound(now, /*reforming=*/false);
  }
  return id;
}

absl::Status RendezvousState::KeepAlive(const std::string& node_id, TimePoint now) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    return absl::NotFoundError(absl::StrCat(node_id, " is not in the job (declared lost); join again"));
  }
  it->second.lease_expiry = now + options_.lease();
  it->second.last_contact = now;
  return absl::OkStatus();
}

absl::Status RendezvousState::SetProgress(const std::string& node_id, status::NodeStatus progress) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat(node_id, " is not in the job"));
  const NodeInfo& info = it->second.info;
  const size_t rows = std::min<size_t>(std::max(info.nproc, 0), status::kMaxRanksPerNode);
  if (absl::Status st = status::CheckNodeStatus(progress, rows); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("status from ", NodeLabel(info), ": ", st.message()));
  }
  progress.node_id = node_id;
  progress.host = info.host;
  progress.nproc = info.nproc;
  it->second.progress = std::move(progress);
  return absl::OkStatus();
}

absl::StatusOr<NodeView> RendezvousState::View(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() && !Terminal()) {
    return absl::NotFoundError(absl::StrCat(node_id, " is not in the job (declared lost); join again"));
  }
  NodeView v;
  v.version = it == nodes_.end() ? version_ : it->second.view_version;
  v.phase = phase_;
  v.round = round_;
  v.role = it == nodes_.end() ? NodeRole::kWaiting : it->second.role;
  auto a = assignments_.find(node_id);
  if (phase_ == JobPhase::kRunning && a != assignments_.end()) v.assignment = a->second;
  v.reason = reason_;
  v.failures = failures_;
  v.exit_code = exit_code_;
  v.stacks_round = stacks_round_;
  return v;
}

absl::Status RendezvousState::ReportFailure(const std::string& node_id, int64_t round,
                                            const std::vector<FailureInfo>& failures, TimePoint now) {
  if (phase_ != JobPhase::kRunning || round != round_ || !assignments_.count(node_id)) {
    return absl::AbortedError(absl::StrCat("round ", round, " is no longer running (current round ",
                                           round_, ", ", PhaseName(phase_), ")"));
  }
  if (failures.empty()) return absl::InvalidArgumentError("a failure report needs at least one failure");
  const FailureInfo& failure = failures[0];
  ++restarts_used_;
  const std::string worker = absl::StrCat("worker rank ", failure.global_rank, " on ", NodeLabel(nodes_.at(node_id).info));
  if (failure.kind == kHangFailure) stacks_round_ = round;
  if (failure.kind == kNoProgressFailure) {
    Fail(absl::StrCat(worker, ": ", failure.message), failures, ExitCodeOf(failure));
    return absl::OkStatus();
  }
  std::string what =
      failure.kind == kHangFailure
          ? absl::StrCat(worker, " hung (", failure.message.substr(0, 1000), ")")
          : absl::StrCat(worker, " failed (",
                         failure.signal ? absl::StrCat("signal ", failure.signal) : absl::StrCat("exit code ", failure.exit_code),
                         ")");
  if (restarts_used_ > options_.max_restarts) {
    Fail(absl::StrCat(what, "; no restarts left (--max-restarts ", options_.max_restarts, ")"),
         failures, ExitCodeOf(failure));
    return absl::OkStatus();
  }
  EndRound(absl::StrCat(what, "; restart ", restarts_used_, "/", options_.max_restarts), now);
  return absl::OkStatus();
}

absl::Status RendezvousState::ReportSuccess(const std::string& node_id, int64_t round, TimePoint now) {
  if (phase_ != JobPhase::kRunning || round != round_ || !assignments_.count(node_id)) {
    return absl::AbortedError(absl::StrCat("round ", round, " is no longer running (current round ",
                                           round_, ", ", PhaseName(phase_), ")"));
  }
  succeeded_[node_id] = true;
  ++version_;
  if (std::all_of(members_.begin(), members_.end(), [&](const std::string& m) { return succeeded_[m]; })) {
    phase_ = JobPhase::kSucceeded;
    reason_ = "every worker on every node exited 0";
    TouchAll();
  }
  return absl::OkStatus();
}

absl::Status RendezvousState::Leave(const std::string& node_id, TimePoint now) {
  if (!nodes_.count(node_id)) return absl::OkStatus();
  DropNode(node_id, "left the job", now);
  return absl::OkStatus();
}

void RendezvousState::Kill(const std::string& reason) {
  if (Terminal()) return;
  phase_ = JobPhase::kKilled;
  reason_ = reason;
  TouchAll();
}

TimePoint RendezvousState::Expiry(const Node& n) const {
  // Once the job is over nothing is left to protect: a node that misses one keep-alive is gone,
  // so the service host does not wait for a dead node (it waits for live ones to learn the end).
  if (!Terminal()) return n.lease_expiry;
  return std::min(n.lease_expiry, n.last_contact + options_.keep_alive_interval * 5 / 4);
}

void RendezvousState::Tick(TimePoint now) {
  std::vector<std::string> expired;
  for (const auto& [id, n] : nodes_) {
    if (Expiry(n) <= now) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    DropNode(id, absl::StrCat("lost: no keep-alive for ", options_.lease().count(), " ms"), now);
  }
  if (phase_ != JobPhase::kForming) return;
  if (now >= forming_since_ + options_.join_timeout) {
    Fail(absl::StrCat("the rendezvous did not complete within join_timeout (",
                      options_.join_timeout.count() / 1000.0, " s): ", nodes_.size(), " of ",
                      options_.static_ranks ? options_.max_nodes : options_.min_nodes,
                      " nodes present. ", reason_),
         {}, 1);
    return;
  }
  MaybeFormRound(now, /*reforming=*/round_ >= 0);
}

std::optional<TimePoint> RendezvousState::NextDeadline() const {
  std::optional<TimePoint> next;
  auto consider = [&](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& [id, n] : nodes_) consider(Expiry(n));
  if (phase_ == JobPhase::kForming) {
    consider(forming_since_ + options_.join_timeout);
    if (min_reached_at_) consider(*min_reached_at_ + options_.last_call_timeout);
  }
  return next;
}

std::vector<std::string> RendezvousState::LiveCandidates() const {
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [id, n] : nodes_) order.emplace_back(n.join_seq, id);
  std::sort(order.begin(), order.end());
  std::vector<std::string> ids;
  for (auto& [seq, id] : order) ids.push_back(id);
  return ids;
}

void RendezvousState::MaybeFormRound(TimePoint now, bool reforming) {
  if (phase_ != JobPhase::kForming) return;
  std::vector<std::string> candidates = LiveCandidates();
  const int n = static_cast<int>(candidates.size());
  if (options_.static_ranks) {
    if (n < options_.max_nodes) return;
    std::sort(candidates.begin(), candidates.end(), [&](const std::string& a, const std::string& b) {
      return nodes_.at(a).info.requested_rank < nodes_.at(b).info.requested_rank;
    });
    FormRound(candidates);
    return;
  }
  if (n < options_.min_nodes) {
    min_reached_at_.reset();
    return;
  }
  if (n >= options_.max_nodes || reforming) {
    candidates.resize(std::min(n, options_.max_nodes));
    FormRound(candidates);
    return;
  }
  if (!min_reached_at_) min_reached_at_ = now;
  if (now >= *min_reached_at_ + options_.last_call_timeout) FormRound(candidates);
}

void RendezvousState::FormRound(std::vector<std::string> members) {
  ++round_;
  members_ = std::move(members);
  assignments_.clear();
  succeeded_.clear();
  min_reached_at_.reset();
  int world = 0;
  for (const std::string& m : members_) world += nodes_.at(m).info.nproc;
  NodeInfo master = nodes_.at(members_[0]).info;
  if (!options_.workers_store_addr.empty()) {
    master.store_addr = options_.workers_store_addr;
    master.store_port = options_.workers_store_port;
  }
  int offset = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    Node& node = nodes_.at(members_[i]);
    node.role = NodeRole::kMember;
    assignments_[members_[i]] = Assignment{round_, static_cast<int>(i), static_cast<int>(members_.size()),
                                           offset, world, master.store_addr, master.store_port};
    offset += node.info.nproc;
  }
  for (auto& [id, n] : nodes_) {
    if (!assignments_.count(id)) n.role = NodeRole::kSpare;
  }
  phase_ = JobPhase::kRunning;
  TouchAll();
}

void RendezvousState::EndRound(const std::string& reason, TimePoint now) {
  phase_ = JobPhase::kForming;
  reason_ = reason;
  forming_since_ = now;
  members_.clear();
  assignments_.clear();
  for (auto& [id, n] : nodes_) n.role = NodeRole::kWaiting;
  TouchAll();
  MaybeFormRound(now, /*reforming=*/true);
  SayWhoIsAwaited();
}

void RendezvousState::Fail(const std::string& reason, std::vector<FailureInfo> failures, int exit_code) {
  phase_ = JobPhase::kFailed;
  reason_ = reason;
  failures_ = std::move(failures);
  exit_code_ = exit_code;
  TouchAll();
}

void RendezvousState::DropNode(const std::string& node_id, const std::string& why, TimePoint now) {
  const Node node = nodes_.at(node_id);
  nodes_.erase(node_id);
  Touch(node_id);  // its watcher learns it is out
  bool member = assignments_.count(node_id) > 0;
  bool finished = member && succeeded_[node_id];
  if (phase_ == JobPhase::kRunning && member && !finished) {
    EndRound(absl::StrCat(NodeLabel(node.info), " ", why), now);
  }
}

void RendezvousState::SayWhoIsAwaited() {
  if (phase_ != JobPhase::kForming || !options_.static_ranks) return;
  std::vector<std::string> missing;
  for (int rank = 0; rank < options_.max_nodes; ++rank) {
    bool present = std::any_of(nodes_.begin(), nodes_.end(),
                               [&](const auto& n) { return n.second.info.requested_rank == rank; });
    if (present) continue;
    auto known = last_known_.find(rank);
    missing.push_back(known != last_known_.end() ? NodeLabel(known->second) : absl::StrCat("node ", rank));
  }
  if (missing.empty()) return;
  absl::StrAppend(&reason_, "; waiting for ", absl::StrJoin(missing, ", "), " to come back, up to ",
                  options_.join_timeout.count() / 1000.0, " s (join_timeout); Ctrl-C to stop");
}

void RendezvousState::TouchAll() {
  ++version_;
  for (auto& [id, n] : nodes_) n.view_version = version_;
  touched_.all = true;
}

void RendezvousState::Touch(const std::string& node) {
  ++version_;
  auto it = nodes_.find(node);
  if (it != nodes_.end()) it->second.view_version = version_;
  touched_.nodes.push_back(node);
}

RendezvousState::Touched RendezvousState::TakeTouched() { return std::exchange(touched_, Touched{}); }

JobSummary RendezvousState::Summary() const {
  JobSummary s;
  s.phase = phase_;
  s.round = round_;
  s.restarts_used = restarts_used_;
  for (const auto& [id, n] : nodes_) s.nodes.emplace_back(id, n.info);
  return s;
}

std::vector<status::NodeStatus> RendezvousState::Progress() const {
  std::vector<status::NodeStatus> out;
  out.reserve(nodes_.size());
  for (const auto& [id, n] : nodes_) {
    if (n.progress) {
      out.push_back(*n.progress);
    } else {
      status::NodeStatus none;
      none.node_id = id;
      none.host = n.info.host;
      none.nproc = n.info.nproc;
      out.push_back(std::move(none));
    }
  }
  return out;
}

}  // namespace dtrun::rdzv
