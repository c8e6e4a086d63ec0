#include "rendezvous/rendezvous_state.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rendezvous/buddy_ring.h"

namespace dtrun::rdzv {

const char* FailureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kHang: return "hang";
    case FailureKind::kNoProgress: return "no_progress";
    case FailureKind::kOomKilled: return "oom_killed";
    case FailureKind::kExited: break;
  }
  return "";
}

FailureKind FailureKindFromName(absl::string_view name) {
  if (name == "hang") return FailureKind::kHang;
  if (name == "no_progress") return FailureKind::kNoProgress;
  if (name == "oom_killed") return FailureKind::kOomKilled;
  return FailureKind::kExited;
}

std::string HowItEnded(const FailureInfo& f) {
  constexpr size_t kMaxErrorBytes = 200;
  std::string how = f.signal ? absl::StrCat("signal ", f.signal) : absl::StrCat("exit code ", f.exit_code);
  if (f.kind == FailureKind::kOomKilled) return absl::StrCat(how, ": out of memory, killed by the kernel");
  const absl::string_view first = absl::string_view(f.message).substr(0, f.message.find('\n'));
  if (first.empty()) return how;
  std::string line(first.substr(0, kMaxErrorBytes));
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // the worker's bytes reach every console
  }
  return absl::StrCat(how, ": ", line, first.size() > kMaxErrorBytes ? "..." : "");
}

namespace {

status::StragglerKind KindOf(straggler::Culprit culprit) {
  switch (culprit) {
    case straggler::Culprit::kRank: return status::StragglerKind::kRank;
    case straggler::Culprit::kNode: return status::StragglerKind::kNode;
    case straggler::Culprit::kLink: return status::StragglerKind::kLink;
  }
  return status::StragglerKind::kRank;
}

std::string FormatSeconds(std::chrono::steady_clock::duration d) {
  return absl::StrFormat("%.1f s", std::chrono::duration<double>(d).count());
}

// A round a second for 30,000 years: what a joiner may say it has seen (rounds go above it).
constexpr int64_t kMaxRoundsSeen = int64_t{1} << 40;

constexpr char kStartedAgain[] = "was started again: its earlier agent is gone";

// `joiner` is the agent of `holder`'s machine started again after `holder` died: the same
// address, and no other agent of the rank alive there. (A supervisor restarts a killed dtrun in a
// second or two; the holder's lease would keep the rank for keep_alive_interval x
// keep_alive_max_attempt, 15 s by default, and the restarted node used to be refused.)
bool IsRestartOf(const NodeInfo& joiner, const NodeInfo& holder) {
  return joiner.predecessor_dead && !joiner.store_addr.empty() && joiner.store_addr == holder.store_addr;
}

absl::Status CheckFailureDomain(const NodeInfo& node) {
  if (IsFailureDomainName(node.failure_domain)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), "'s --failure-domain is not a name of at most ",
                                                 kMaxFailureDomainBytes,
                                                 " printable characters without spaces; name its rack or switch"));
}

}  // namespace

bool IsFailureDomainName(absl::string_view domain) {
  return domain.size() <= kMaxFailureDomainBytes &&
         std::all_of(domain.begin(), domain.end(), [](char c) { return c > ' ' && c < 127; });
}

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
    : options_(std::move(options)), started_(now), forming_since_(now) {}

bool RendezvousState::Terminal() const {
  return phase_ == JobPhase::kSucceeded || phase_ == JobPhase::kFailed || phase_ == JobPhase::kKilled;
}

absl::StatusOr<std::string> RendezvousState::Join(const NodeInfo& node, TimePoint now) {
  if (Terminal()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is already over (", PhaseName(phase_), "); start a new run id"));
  }
  if (node.nproc < 0 || static_cast<size_t>(node.nproc) > status::kMaxRanksPerNode) {
    // The round's bookkeeping is per rank: a node's claim must not size it.
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), " says it runs ", node.nproc,
                                                   " workers; --nproc-per-node must be 0..", status::kMaxRanksPerNode));
  }
  if (node.rounds_seen < 0 || node.rounds_seen > kMaxRoundsSeen) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), " says it has seen ", node.rounds_seen,
                                                   " rounds; 0..", kMaxRoundsSeen, " is possible"));
  }
  if (node.restarts_used < 0 || node.restarts_used > node.rounds_seen) {
    // Each restart began a round: more than it saw is a lie, and would spend the others' budget.
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), " says its job spent ", node.restarts_used,
                                                   " restarts in ", node.rounds_seen, " rounds; 0..", node.rounds_seen,
                                                   " is possible"));
  }
  if (absl::Status domain = CheckFailureDomain(node); !domain.ok()) return domain;
  if (options_.static_ranks) {
    if (node.requested_rank < 0 || node.requested_rank >= options_.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("--node-rank ", node.requested_rank,
                                                     " is out of range; use 0..", options_.max_nodes - 1));
    }
    if (auto held = by_rank_.find(node.requested_rank); held != by_rank_.end()) {
      auto holder = nodes_.find(held->second);
      if (!IsRestartOf(node, holder->second.info)) return RefuseClaim(holder->second, node, now);
      DropNode(holder, kStartedAgain, now);
    }
  } else if (node.predecessor_dead && !node.store_addr.empty()) {
    for (auto at = by_addr_.find(node.store_addr); at != by_addr_.end(); at = by_addr_.find(node.store_addr)) {
      DropNode(nodes_.find(at->second), kStartedAgain, now);
    }
  }
  rounds_seen_ = std::max(rounds_seen_, node.rounds_seen);
  restarts_used_ = std::max(restarts_used_, node.restarts_used);
  std::string id =
      absl::StrCat("node", next_seq_, options_.instance.empty() ? "" : ".", options_.instance, "-", node.host);
  Node& n = nodes_[id];
  n.info = node;
  if (!options_.static_ranks && node.requested_rank >= 0) {
    n.info.rank_hint = node.requested_rank;  // the service places the node; the rank is a preference
    n.info.requested_rank = -1;
  }
  n.join_seq = next_seq_++;
  by_join_.emplace(n.join_seq, id);
  former_spares_ += WasASpare(n.info);
  by_addr_.emplace(n.info.store_addr, id);
  if (n.info.requested_rank >= 0) {
    by_rank_[node.requested_rank] = id;
    last_known_[node.requested_rank] = node;
  }
  n.last_contact = now;
  by_contact_.emplace(now, id);
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

// A node started again on another machine (a Kubernetes pod rescheduled, a spare host given the
// rank) cannot tell whether the holder is dead; only the holder's silence can. So the joiner waits
// while the holder is silent and gets the rank when its lease runs out (Tick drops it); the holder
// heard from after the claim began is alive, and the joiner a duplicate. From the holder's own
// address the joiner said no predecessor of it is dead: a duplicate at once.
absl::Status RendezvousState::RefuseClaim(Node& holder, const NodeInfo& joiner, TimePoint now) {
  const auto duplicate = [&](absl::string_view how) {
    return absl::AlreadyExistsError(absl::StrCat("node rank ", joiner.requested_rank, " has already joined from ",
                                                 NodeLabel(holder.info), how, "; give every node its own --node-rank"));
  };
  if (joiner.store_addr == holder.info.store_addr) return duplicate("");
  std::optional<Node::Claim>& claim = holder.claim;
  if (!claim || now - claim->latest > kClaimForgottenAfter) {
    claim = Node::Claim{now, now};
  } else if (holder.last_contact > claim->since) {
    const auto after = holder.last_contact - claim->since;
    claim.reset();  // settled: a later claim (this holder dead by then) starts afresh
    return duplicate(absl::StrCat(", which is alive (heard from ", FormatSeconds(after), " after this node asked)"));
  }
  claim->latest = now;
  const std::chrono::steady_clock::duration silent = now - holder.last_contact;
  const std::chrono::steady_clock::duration left = options_.lease() - silent;
  return absl::AbortedError(absl::StrCat(
      "node rank ", joiner.requested_rank, " is held by ", NodeLabel(holder.info), ", silent for ",
      FormatSeconds(silent), ": this node takes the rank if that one stays silent until its lease runs out (in ",
      FormatSeconds(std::max(left, left.zero())), "), or stops if it answers first"));
}

void RendezvousState::Renew(Nodes::iterator it, TimePoint now) {
  Node& n = it->second;
  by_contact_.erase({n.last_contact, it->first});
  n.last_contact = now;
  by_contact_.emplace_hint(by_contact_.end(), now, it->first);  // usually the latest contact
}

absl::Status RendezvousState::KeepAlive(const std::string& node_id, TimePoint now) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    return absl::NotFoundError(absl::StrCat(node_id, " is not in the job (declared lost); join again"));
  }
  Renew(it, now);
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
  // Looked at only until some node says so: status pushes come with every keep-alive.
  const bool parks = !program_parks_ && std::any_of(progress.ranks.begin(), progress.ranks.end(),
                                                    [](const status::RankStatus& r) { return r.warm; });
  WatchForStragglers(it->second, progress);
  it->second.progress = std::move(progress);
  if (parks) {
    program_parks_ = true;
    TouchAll();  // every node's view changes: waiting spares learn it now
  }
  return absl::OkStatus();
}

void RendezvousState::WatchForStragglers(const Node& node, const status::NodeStatus& progress) {
  // Only a member's rows of the running round, and only the ranks its assignment gave it.
  if (!node.assignment || phase_ != JobPhase::kRunning || progress.round != round_) return;
  const int first = node.assignment->rank_offset;
  for (const status::RankStatus& r : progress.ranks) {
    if (r.global_rank < first || r.global_rank >= first + node.info.nproc) continue;
    for (const status::StepWait& w : r.waits) stragglers_.Observe(r.global_rank, w.step, w.wait_s, w.step_s).IgnoreError();
  }
  // A rank, else perhaps a whole node whose ranks take turns at being last; or a slow link.
  const std::optional<straggler::Finding> found = stragglers_.Named();
  if (!found || found->node < 0 || static_cast<size_t>(found->node) >= members_.size()) {
    straggler_.reset();
    straggler_member_.clear();
    return;
  }
  straggler_member_ = members_[static_cast<size_t>(found->node)];
  straggler_ = status::StragglerStatus{found->rank,
                                       NodeLabel(nodes_.at(straggler_member_).info).substr(0, status::kMaxStatusString),
                                       found->verdict.last_in,
                                       found->verdict.window,
                                       std::min(1.0, found->verdict.cost_share),
                                       stragglers_.named_since(),
                                       KindOf(found->culprit)};
}

bool RendezvousState::MaybeReplaceStraggler(TimePoint now) {
  // A slow link is not one node's fault: replacing the node at one end may not help.
  if (!options_.replace_stragglers || straggler_replaced_ || options_.static_ranks || !straggler_ ||
      straggler_->kind == status::StragglerKind::kLink || phase_ != JobPhase::kRunning || now < next_replace_look_) {
    return false;
  }
  // What follows walks the node table: at most once a second, however many nodes push.
  next_replace_look_ = now + std::chrono::seconds(1);
  const bool has_spare = std::any_of(by_join_.begin(), by_join_.end(), [&](const auto& entry) {
    return nodes_.at(entry.second).role == NodeRole::kSpare;
  });
  nodes_visited_ += by_join_.size();
  auto slow = nodes_.find(straggler_member_);
  if (slow == nodes_.end() || !has_spare) return false;
  straggler_replaced_ = true;
  Node& n = slow->second;
  by_join_.erase(n.join_seq);  // to the back: the next round's members are the first joined
  n.join_seq = next_seq_++;
  by_join_.emplace(n.join_seq, slow->first);
  const std::string why = status::DescribeStraggler(*straggler_);
  EndRound(absl::StrCat(NodeLabel(n.info), " is replaced by a spare (--on-straggler replace): ", why), now);
  return true;
}

absl::StatusOr<NodeView> RendezvousState::View(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() && !Terminal()) {
    return absl::NotFoundError(absl::StrCat(node_id, " is not in the job (declared lost); join again"));
  }
  NodeView v;
  v.version = it == nodes_.end() ? version_ : std::max(it->second.view_version, all_version_);
  v.phase = phase_;
  v.round = round_;
  v.role = it == nodes_.end() ? NodeRole::kWaiting : it->second.role;
  if (phase_ == JobPhase::kRunning && it != nodes_.end()) v.assignment = it->second.assignment;
  v.reason = reason_;
  if (phase_ == JobPhase::kForming && !awaited_names_.empty()) {
    v.awaited = absl::StrCat(awaited_names_, " to come back, up to ", options_.join_timeout.count() / 1000.0,
                             " s (join_timeout); Ctrl-C to stop");
  }
  v.failures = failures_;
  v.exit_code = exit_code_;
  v.stacks_round = stacks_round_;
  v.program_parks = program_parks_;
  v.restarts_used = restarts_used_;
  return v;
}

RendezvousState::Node* RendezvousState::Member(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  return it != nodes_.end() && it->second.assignment ? &it->second : nullptr;
}

absl::Status RendezvousState::ReportFailure(const std::string& node_id, int64_t round,
                                            const std::vector<FailureInfo>& failures, TimePoint now) {
  Node* member = Member(node_id);
  if (phase_ != JobPhase::kRunning || round != round_ || member == nullptr) {
    return absl::AbortedError(absl::StrCat("round ", round, " is no longer running (current round ",
                                           round_, ", ", PhaseName(phase_), ")"));
  }
  if (failures.empty()) return absl::InvalidArgumentError("a failure report needs at least one failure");
  const FailureInfo& failure = failures[0];
  ++restarts_used_;
  const std::string worker = absl::StrCat("worker rank ", failure.global_rank, " on ", NodeLabel(member->info));
  if (failure.kind == FailureKind::kHang) stacks_round_ = round;
  if (failure.kind == FailureKind::kNoProgress) {
    Fail(absl::StrCat(worker, ": ", failure.message), failures, ExitCodeOf(failure));
    return absl::OkStatus();
  }
  std::string what = failure.kind == FailureKind::kHang
                         ? absl::StrCat(worker, " hung (", failure.message.substr(0, 1000), ")")
                         : absl::StrCat(worker, " failed (", HowItEnded(failure), ")");
  if (restarts_used_ > options_.max_restarts) {
    Fail(absl::StrCat(what, "; no restarts left (--max-restarts ", options_.max_restarts, ")"),
         failures, ExitCodeOf(failure));
    return absl::OkStatus();
  }
  EndRound(absl::StrCat(what, "; restart ", restarts_used_, "/", options_.max_restarts), now);
  return absl::OkStatus();
}

absl::Status RendezvousState::ReportSuccess(const std::string& node_id, int64_t round, TimePoint now) {
  Node* member = Member(node_id);
  if (phase_ != JobPhase::kRunning || round != round_ || member == nullptr) {
    return absl::AbortedError(absl::StrCat("round ", round, " is no longer running (current round ",
                                           round_, ", ", PhaseName(phase_), ")"));
  }
  ++version_;
  if (member->succeeded) return absl::OkStatus();
  member->succeeded = true;
  if (++succeeded_ == members_.size()) {
    phase_ = JobPhase::kSucceeded;
    reason_ = "every worker on every node exited 0";
    TouchAll();
  }
  return absl::OkStatus();
}

absl::Status RendezvousState::Leave(const std::string& node_id, TimePoint now) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) DropNode(it, "left the job", now);
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
  // Either way the node that was heard from first expires first.
  if (!Terminal()) return n.last_contact + options_.lease();
  return n.last_contact + std::min<std::chrono::milliseconds>(options_.lease(), options_.keep_alive_interval * 5 / 4);
}

void RendezvousState::Tick(TimePoint now) {
  while (!by_contact_.empty()) {
    auto it = nodes_.find(by_contact_.begin()->second);
    if (Expiry(it->second) > now) break;
    DropNode(it, absl::StrCat("lost: no keep-alive for ", options_.lease().count(), " ms"), now);
  }
  if (phase_ != JobPhase::kForming) return;
  if (now >= forming_since_ + options_.join_timeout) {
    Fail(absl::StrCat("the rendezvous did not complete within join_timeout (",
                      options_.join_timeout.count() / 1000.0, " s): ", nodes_.size(), " of ",
                      options_.static_ranks ? options_.max_nodes : options_.min_nodes,
                      " nodes present. ", reason_, awaited_names_.empty() ? "" : "; missing ", awaited_names_),
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
  if (!by_contact_.empty()) consider(Expiry(nodes_.at(by_contact_.begin()->second)));
  if (phase_ == JobPhase::kForming) {
    consider(forming_since_ + options_.join_timeout);
    if (min_reached_at_) consider(*min_reached_at_ + options_.last_call_timeout);
    if (min_reached_at_ && StartedAgain()) consider(LastRoundAwaitedUntil());
  }
  return next;
}

std::vector<std::string> RendezvousState::FirstJoined(size_t count) const {
  std::vector<std::string> ids;
  ids.reserve(std::min(count, by_join_.size()));
  if (!last_members_.empty() || former_spares_ == 0) {
    for (auto it = by_join_.begin(); it != by_join_.end() && ids.size() < count; ++it) ids.push_back(it->second);
    nodes_visited_ += ids.size();
    return ids;
  }
  // A service started again: the last round's spares after everyone else.
  for (const bool spares : {false, true}) {
    for (auto it = by_join_.begin(); it != by_join_.end() && ids.size() < count; ++it) {
      if (WasASpare(nodes_.at(it->second).info) == spares) ids.push_back(it->second);
    }
  }
  nodes_visited_ += 2 * by_join_.size();
  return ids;
}

void RendezvousState::MaybeFormRound(TimePoint now, bool reforming) {
  if (phase_ != JobPhase::kForming) return;
  const int n = static_cast<int>(nodes_.size());
  if (options_.static_ranks) {
    if (n < options_.max_nodes) return;
    std::vector<std::string> by_rank;  // every rank is held: by_rank_ is 0..max_nodes-1
    by_rank.reserve(by_rank_.size());
    for (const auto& [rank, id] : by_rank_) by_rank.push_back(id);
    nodes_visited_ += by_rank.size();
    FormRound(std::move(by_rank));
    return;
  }
  if (n < options_.min_nodes) {
    min_reached_at_.reset();
    return;
  }
  // A service started again takes the last round's spares only after its members and new nodes:
  // a spare that joined it first would take the place of a member on its way, and the ranks of
  // that place away from the member's in-memory snapshots. A member not back within a lease of
  // the service's start is lost, so the round then forms as a running one re-forms after a loss.
  const int spares = last_members_.empty() ? former_spares_ : 0;
  const bool last_round_awaited = StartedAgain() && now >= LastRoundAwaitedUntil();
  if (n - spares >= options_.max_nodes || reforming || last_round_awaited) {
    FormRound(FirstJoined(options_.max_nodes));
    return;
  }
  if (!min_reached_at_) min_reached_at_ = now;
  if (now >= *min_reached_at_ + options_.last_call_timeout) FormRound(FirstJoined(std::min(n, options_.max_nodes)));
}

// `chosen` reordered so that a node that was at group rank i in the last round stays there; the
// others fill the remaining places in their given (join) order.
static std::vector<std::string> KeepGroupRanks(const std::vector<std::string>& last, std::vector<std::string> chosen) {
  std::set<std::string> in_chosen(chosen.begin(), chosen.end());
  std::vector<std::string> order(chosen.size());
  std::set<std::string> placed;
  for (size_t i = 0; i < order.size() && i < last.size(); ++i) {
    if (in_chosen.count(last[i])) {
      order[i] = last[i];
      placed.insert(last[i]);
    }
  }
  size_t next = 0;
  for (std::string& id : chosen) {
    if (placed.count(id)) continue;
    while (!order[next].empty()) ++next;
    order[next] = std::move(id);
  }
  return order;
}

std::vector<std::string> RendezvousState::PlacesClaimed(const std::vector<std::string>& members) const {
  std::vector<std::string> places(members.size());  // "": unclaimed
  for (const std::string& id : members) {
    const int g = nodes_.at(id).info.last_group_rank;
    if (g >= 0 && g < static_cast<int>(places.size()) && places[g].empty()) places[g] = id;
  }
  return places;
}

void RendezvousState::FormRound(std::vector<std::string> members) {
  round_ = std::max(round_ + 1, rounds_seen_);
  ClearRound(NodeRole::kSpare);  // the members are made members below
  if (!options_.static_ranks) {
    // Those without a place from the last round come in by their hint (no hint last), then in
    // join order. std::sort: no temporary buffer, as stable_sort would take.
    std::sort(members.begin(), members.end(), [this](const std::string& a, const std::string& b) {
      auto key = [this](const std::string& id) {
        const Node& n = nodes_.at(id);
        return std::make_pair(n.info.rank_hint < 0 ? std::numeric_limits<int>::max() : n.info.rank_hint, n.join_seq);
      };
      return key(a) < key(b);
    });
    // A service started again has no last round of its own: its joiners say where they were.
    std::vector<std::string> claimed;
    if (last_members_.empty()) claimed = PlacesClaimed(members);
    members = KeepGroupRanks(last_members_.empty() ? claimed : last_members_, std::move(members));
  }
  members_ = std::move(members);
  last_members_ = members_;
  min_reached_at_.reset();
  int world = 0;
  for (const std::string& m : members_) world += nodes_.at(m).info.nproc;
  world_size_ = world;
  if (world <= straggler::StragglerWatch::kMaxRanks) {
    std::vector<int> node_of_rank;
    node_of_rank.reserve(static_cast<size_t>(world));
    for (size_t i = 0; i < members_.size(); ++i) {
      node_of_rank.insert(node_of_rank.end(), nodes_.at(members_[i]).info.nproc, static_cast<int>(i));
    }
    stragglers_.Reset(world, std::move(node_of_rank));
  } else {
    stragglers_.Reset(0);  // past what the watch keeps: nobody is named
  }
  NodeInfo master = nodes_.at(members_[0]).info;
  if (options_.workers_store_at_endpoint) {
    master.store_addr.clear();
    master.store_port = 0;
  }
  int offset = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    Node& node = nodes_.at(members_[i]);
    node.role = NodeRole::kMember;
    node.assignment = Assignment{
        round_,           static_cast<int>(i), static_cast<int>(members_.size()), offset, world, master.store_addr,
        master.store_port};
    offset += node.info.nproc;
  }
  AssignBuddies(world);
  phase_ = JobPhase::kRunning;
  TouchAll();
}

void RendezvousState::AssignBuddies(int world) {
  std::vector<const std::string*> domains;
  domains.reserve(members_.size());
  for (const std::string& m : members_) domains.push_back(&nodes_.at(m).info.failure_domain);
  const std::vector<int> buddies = BuddyRanks(domains);
  std::vector<CopiesOfRanks> copies(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    Node& node = nodes_.at(members_[i]);
    Assignment& a = *node.assignment;
    CopiesOfRanks& mine = copies[i];
    mine = {a.rank_offset, node.info.nproc, world, {}};
    if (!buddies.empty()) {
      const NodeInfo& buddy = nodes_.at(members_[buddies[i]]).info;
      a.buddy_addr = buddy.replica_addr;
      a.buddy_port = buddy.replica_port;
      a.buddy_failure_domain = buddy.failure_domain;
      if (!buddy.replica_addr.empty()) mine.holders.push_back(members_[buddies[i]]);
    }
    // The same ranks here last round: their copies are where that round and the one before sent
    // them, while those nodes are still in the job (a new buddy holds nothing yet).
    if (i >= copies_.size() || copies_[i].rank_offset != mine.rank_offset || copies_[i].nproc != mine.nproc ||
        copies_[i].world_size != world) {
      continue;
    }
    for (const std::string& holder : copies_[i].holders) {
      const auto it = nodes_.find(holder);
      if (it == nodes_.end() || holder == members_[i]) continue;
      a.copies_at.push_back({it->second.info.replica_addr, it->second.info.replica_port});
      if (mine.holders.size() < kCopyHolders &&
          std::find(mine.holders.begin(), mine.holders.end(), holder) == mine.holders.end()) {
        mine.holders.push_back(holder);
      }
    }
  }
  copies_ = std::move(copies);
}

void RendezvousState::EndRound(const std::string& reason, TimePoint now) {
  phase_ = JobPhase::kForming;
  reason_ = reason;
  forming_since_ = now;
  ClearRound(NodeRole::kWaiting);
  TouchAll();
  MaybeFormRound(now, /*reforming=*/true);
  SayWhoIsAwaited();
}

void RendezvousState::ClearRound(NodeRole everyone) {
  members_.clear();
  world_size_ = 0;
  stragglers_.Reset(0);
  straggler_.reset();
  straggler_member_.clear();
  succeeded_ = 0;
  ForEachNode([everyone](const std::string&, Node& n) {
    n.role = everyone;
    n.assignment.reset();
    n.succeeded = false;
  });
}

void RendezvousState::Fail(const std::string& reason, std::vector<FailureInfo> failures, int exit_code) {
  phase_ = JobPhase::kFailed;
  reason_ = reason;
  failures_ = std::move(failures);
  exit_code_ = exit_code;
  TouchAll();
}

void RendezvousState::DropNode(Nodes::iterator it, const std::string& why, TimePoint now) {
  const std::string node_id = it->first;
  const NodeInfo info = std::move(it->second.info);
  const bool unfinished_member = it->second.assignment && !it->second.succeeded;
  by_contact_.erase({it->second.last_contact, node_id});
  by_join_.erase(it->second.join_seq);
  former_spares_ -= WasASpare(info);
  for (auto [at, end] = by_addr_.equal_range(info.store_addr); at != end; ++at) {
    if (at->second == node_id) {
      by_addr_.erase(at);
      break;
    }
  }
  if (auto r = by_rank_.find(info.requested_rank); r != by_rank_.end() && r->second == node_id) by_rank_.erase(r);
  nodes_.erase(it);
  Touch(node_id);  // its watcher learns it is out
  if (phase_ == JobPhase::kRunning && unfinished_member) EndRound(absl::StrCat(NodeLabel(info), " ", why), now);
}

void RendezvousState::SayWhoIsAwaited() {
  awaited_names_.clear();
  if (phase_ != JobPhase::kForming || !options_.static_ranks) return;
  constexpr size_t kNamed = 8;  // the reason goes to every node: its length must not grow with the job
  std::vector<std::string> missing;
  int more = 0;
  for (int rank = 0; rank < options_.max_nodes; ++rank) {
    if (by_rank_.count(rank)) continue;
    if (missing.size() == kNamed) {
      ++more;
      continue;
    }
    auto known = last_known_.find(rank);
    missing.push_back(known != last_known_.end() ? NodeLabel(known->second) : absl::StrCat("node ", rank));
  }
  nodes_visited_ += options_.max_nodes;
  if (missing.empty()) return;
  awaited_names_ = absl::StrCat(absl::StrJoin(missing, ", "), more > 0 ? absl::StrCat(" and ", more, " more") : "");
}

void RendezvousState::TouchAll() {
  all_version_ = ++version_;
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
  s.nodes.reserve(nodes_.size());
  ForEachNode([&](const std::string& id, const Node& n) { s.nodes.emplace_back(id, n.info); });
  return s;
}

std::vector<status::NodeStatus> RendezvousState::Progress() const {
  std::vector<status::NodeStatus> out;
  out.reserve(nodes_.size());
  ForEachNode([&](const std::string& id, const Node& n) {
    if (n.progress) {
      out.push_back(*n.progress);
    } else {
      status::NodeStatus none;
      none.node_id = id;
      none.host = n.info.host;
      none.nproc = n.info.nproc;
      out.push_back(std::move(none));
    }
  });
  return out;
}

}  // namespace dtrun::rdzv
