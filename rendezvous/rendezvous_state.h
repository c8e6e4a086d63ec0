// The rendezvous state machine: which nodes are in the job, which round is running, who has which
// ranks, when a round ends and whether the job is over. Plain C++: no sockets, no threads, no
// clock of its own — every call takes `now`, so tests drive time. The gRPC service only adapts.
//
// Job phases (a round is one attempt of the whole job; its number is the workers' restart count
// and store prefix, identical on every node):
//   FORMING --enough nodes (static: every rank; elastic: MAX, or MIN + last call; a service
//             started again: also MIN once a lease has passed since it started)--> RUNNING
//   RUNNING --worker failure, budget left | node lost | elastic node joins with room--> FORMING
//   RUNNING --worker failure, budget spent--> FAILED
//   RUNNING --every member reported success--> SUCCEEDED
//   FORMING --join_timeout--> FAILED
//   any     --Kill--> KILLED
// Every change bumps `version`; each node's view carries the version at which it last changed, and
// agents long-poll for a view newer than the one they hold (a join elsewhere wakes nobody).
// Not thread-safe: the service serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rendezvous/rendezvous_options.h"
#include "status/node_status.h"
#include "straggler/straggler_watch.h"

namespace dtrun::rdzv {

using TimePoint = std::chrono::steady_clock::time_point;

struct NodeInfo {
  std::string host;         // for messages
  int nproc = 1;            // workers on this node (may differ between nodes)
  std::string store_addr;   // where this node's agent serves the workers' TCPStore
  int store_port = 0;
  int requested_rank = -1;  // static mode: --node-rank; elastic: -1 (Join moves it to rank_hint)
  std::string replica_addr; // where this node's agent keeps buddy copies of snapshots ("": none)
  int replica_port = 0;
  // Elastic mode: --node-rank as a preference. A round places the nodes that were in no earlier
  // one by it (then by join order), so `dtrun -H a,b` has rank 0 on a. -1: none.
  int rank_hint = -1;
  // No other agent of this node is alive on its machine (static ranks: of this node rank; elastic:
  // of this run), so one at the same address is dead: the node was started again (see Join).
  bool predecessor_dead = false;
  // The newest round this agent has seen + 1 (0: none), from this service or an earlier instance
  // of it (its host's dtrun started again): the next round formed is numbered above it.
  int64_t rounds_seen = 0;
  // The restarts its job had spent, as its newest view said (0..rounds_seen): a service started
  // again goes on from the most any joiner says, so a restart of its host grants no new budget.
  int restarts_used = 0;
  // What it shares with other nodes that one fault can take down together (a rack, a leaf switch;
  // --failure-domain): buddies are chosen in other domains (rendezvous/buddy_ring.h). "": none said.
  std::string failure_domain{};
  // Elastic mode: the group rank it held in the newest round it ran, said when it joins a service
  // that does not know it (started again; -1: none). That service's first round gives it that
  // place again, before hints and join order: its workers' ranks, and so their own in-memory
  // snapshots and their buddy's copies, stay where they were.
  int last_group_rank = -1;
};

// What a joiner's --failure-domain may hold: it is in every view of the job and in logs, so a
// short name of printable characters without spaces.
inline constexpr size_t kMaxFailureDomainBytes = 128;
bool IsFailureDomainName(absl::string_view domain);

// A node's replica endpoint, where it keeps buddy copies (NodeInfo::replica_addr/port).
struct ReplicaEndpoint {
  std::string addr;
  int port = 0;
  bool operator==(const ReplicaEndpoint& o) const { return addr == o.addr && port == o.port; }
};

// A static rank asked for from another address than its holder's waits for the holder's lease
// (RendezvousState::Join): the claimant asks again every kClaimRetryDelay, and a claim not asked
// again for kClaimForgottenAfter is over (its claimant gave up), so a later one starts afresh.
inline constexpr std::chrono::milliseconds kClaimRetryDelay{500};
inline constexpr std::chrono::seconds kClaimForgottenAfter{5};

// How many rounds' buddies a group rank's copies are remembered on: a round that fails before its
// first copies land still has the round before's.
inline constexpr size_t kCopyHolders = 2;

struct Assignment {
  int64_t round = 0;
  int group_rank = 0;
  int group_world_size = 1;
  int rank_offset = 0;  // global rank of this node's local rank 0
  int world_size = 1;
  // The workers' store: the agent of group rank 0, or ("", 0) the service's own endpoint, as
  // each agent reaches it (RendezvousOptions::workers_store_at_endpoint).
  std::string master_addr;
  int master_port = 0;
  // The node this one copies its snapshots to, as its agent takes them ("": none, or one node):
  // the next group rank, or with failure domains one in another domain (rendezvous/buddy_ring.h).
  std::string buddy_addr{};
  int buddy_port = 0;
  // Where the copies of this node's ranks went in the last rounds, newest first (at most
  // kCopyHolders, never this node): a node that took the ranks over fetches from these, then from
  // its buddy. Empty where the ranks were laid out otherwise before (the world changed).
  std::vector<ReplicaEndpoint> copies_at{};
  std::string buddy_failure_domain{};  // the buddy's --failure-domain ("": none said)
};

// Why the agent reported a worker's failure.
enum class FailureKind {
  kExited,      // the worker exited (non-zero, or by a signal)
  kHang,        // the agent declared it hung (and collected the job's stacks)
  kNoProgress,  // restarts stopped making progress: the job fails without a restart
  kOomKilled,   // the kernel's out-of-memory killer ended it (agent/oom_kills.h)
};

struct FailureInfo {
  std::string host;
  int global_rank = 0;
  int local_rank = 0;
  int exit_code = 0;
  int signal = 0;
  int64_t pid = 0;
  int64_t time_unix_ms = 0;
  std::string error_file;
  std::string message;
  std::string traceback;
  double error_timestamp = 0;  // from the worker's error file; orders root causes across workers
  FailureKind kind = FailureKind::kExited;
};

// The word for a kind on the wire and in the failure summary ("" for kExited), and back (a word
// this build does not know reads as kExited).
const char* FailureKindName(FailureKind kind);
FailureKind FailureKindFromName(absl::string_view name);

// How a worker ended, in a line: "exit code 1: ValueError: bad batch 7", "signal 9: out of memory,
// killed by the kernel". The error's first line is the worker's (its error file, its stderr): cut
// to 200 bytes, control characters shown as '?', since it reaches every node's console.
std::string HowItEnded(const FailureInfo& f);

// The exit code dtrun reports for a failure: the worker's code, or 128 + signal.
inline int ExitCodeOf(const FailureInfo& f) { return f.signal > 0 ? 128 + f.signal : f.exit_code; }

enum class JobPhase { kForming, kRunning, kSucceeded, kFailed, kKilled };
enum class NodeRole { kWaiting, kMember, kSpare };

struct NodeView {
  uint64_t version = 0;
  JobPhase phase = JobPhase::kForming;
  int64_t round = -1;
  NodeRole role = NodeRole::kWaiting;
  std::optional<Assignment> assignment;  // set while RUNNING for members
  std::string reason;                    // why the last round or the job ended
  // While a static job forms again: whom it waits for, and how long ("node 1 (b, b-addr) to come
  // back, up to 10 s (join_timeout); Ctrl-C to stop"); "" otherwise.
  std::string awaited;
  std::vector<FailureInfo> failures;     // FAILED: the root cause first
  int exit_code = 0;                     // FAILED: the root cause's code (128 + signal if killed)
  // A round that ended because a worker hung: nodes still running it get their workers' stacks
  // before stopping them (-1: none).
  int64_t stacks_round = -1;
  // Some node's workers said their program may be started parked (worker/warm_start.h): a spare,
  // which has run nothing yet, parks its workers too.
  bool program_parks = false;
  int restarts_used = 0;  // of --max-restarts, spent by the job so far
};

struct JobSummary {
  JobPhase phase = JobPhase::kForming;
  int64_t round = -1;
  int restarts_used = 0;
  std::vector<std::pair<std::string, NodeInfo>> nodes;  // id, info
  // Each node's latest status summary (`dtrun status`), in the order of `nodes`; a node that has
  // not pushed one yet has no rows. Filled by RendezvousState::Progress, not by Summary.
  std::vector<status::NodeStatus> progress;
  std::optional<status::StragglerStatus> straggler;  // filled by Summary
};

std::string PhaseName(JobPhase phase);
// How messages name a node: "node 1 (vm, 198.18.0.2)" with static ranks, else "node vm (198.18.0.2)"
// (hostnames alone are ambiguous in clusters of identically named containers).
std::string NodeLabel(const NodeInfo& node);

class RendezvousState {
 public:
  RendezvousState(RendezvousOptions options, TimePoint now);

  // Adds a node. Returns its id. Errors: InvalidArgument (rank out of range), AlreadyExists
  // (static rank held by a live node), FailedPrecondition (the job is over). A joiner that says
  // its predecessor is dead replaces it: with static ranks the holder of its rank at its address,
  // elastic every node at its address, dropped as a lost node would be, without waiting out the
  // lease. A static rank asked for from another address is a claim (Aborted: ask again within
  // kClaimForgottenAfter): the rank goes to the claimant once the holder's lease runs out, and
  // the claim is refused (AlreadyExists) once the holder is heard from after it began.
  absl::StatusOr<std::string> Join(const NodeInfo& node, TimePoint now);
  // Renews the node's lease. NotFound if the node was declared lost (it must join again).
  absl::Status KeepAlive(const std::string& node_id, TimePoint now);
  // Keeps `progress` as the node's latest status summary, with the node's id, host and nproc from
  // its join. InvalidArgument if it breaks status::CheckNodeStatus (at most nproc rows, at most
  // status::kMaxRanksPerNode); NotFound for unknown nodes. The lease is not touched.
  absl::Status SetProgress(const std::string& node_id, status::NodeStatus progress);
  // NotFound for unknown or lost nodes.
  absl::StatusOr<NodeView> View(const std::string& node_id) const;
  // Workers failed in `round` (root cause first; non-empty). Aborted if `round` is not the
  // running round.
  absl::Status ReportFailure(const std::string& node_id, int64_t round,
                             const std::vector<FailureInfo>& failures, TimePoint now);
  // All of the node's workers exited 0 in `round`. Aborted for a stale round.
  absl::Status ReportSuccess(const std::string& node_id, int64_t round, TimePoint now);
  // The node's agent is going away. A member that has not succeeded ends the round.
  absl::Status Leave(const std::string& node_id, TimePoint now);
  void Kill(const std::string& reason);

  // Applies every timeout due at `now`: lost leases, last call, join timeout.
  void Tick(TimePoint now);
  // When Tick must run next (nullopt: nothing pending).
  std::optional<TimePoint> NextDeadline() const;

  // Bumped by every change; a node's own view changes less often (NodeView::version).
  uint64_t version() const { return version_; }
  int64_t round() const { return round_; }
  int world_size() const { return world_size_; }  // the running round's workers (0: none running)
  JobPhase phase() const { return phase_; }
  bool has_nodes() const { return !nodes_.empty(); }
  JobSummary Summary() const;  // O(nodes): for status and shutdown, not for every call
  // Every node's latest summary (JobSummary::progress), in node id order as Summary's nodes.
  std::vector<status::NodeStatus> Progress() const;
  // The rank of the running round judged to hold the job back, from the all-reduce waits the
  // members' summaries carry (docs/DESIGN.md, "Stragglers"). O(1).
  const std::optional<status::StragglerStatus>& straggler() const { return straggler_; }
  // --on-straggler replace: when a straggler is named in an elastic job that has a spare, and no node
  // was replaced before, its node goes to the back of the join order and the round re-forms
  // without it (the spare takes its group rank). Once per job; looks at most once a second. True
  // if it did.
  bool MaybeReplaceStraggler(TimePoint now);

  // Which nodes' views changed since the last call (so the service wakes only their watchers).
  struct Touched {
    bool all = false;
    std::vector<std::string> nodes;
  };
  Touched TakeTouched();

  // Work done over the whole node table, for the scaling guard (rendezvous_scaling_test): calls
  // that are not per round (joins while forming, keep-alives, views, reports) must not add to it.
  uint64_t nodes_visited() const { return nodes_visited_; }

 private:
  struct Node {
    NodeInfo info;
    NodeRole role = NodeRole::kWaiting;
    TimePoint last_contact;  // join or keep-alive: the lease runs from here
    uint64_t join_seq = 0;
    uint64_t view_version = 0;  // version_ when this node alone last changed (see all_version_)
    std::optional<Assignment> assignment;  // a member of the current round
    bool succeeded = false;                // a member that reported success this round
    std::optional<status::NodeStatus> progress;  // the latest status summary it pushed
    // Another address asks for this node's static rank: since when, and its latest ask.
    struct Claim {
      TimePoint since;
      TimePoint latest;
    };
    std::optional<Claim> claim;
  };
  using Nodes = std::map<std::string, Node>;

  // Every loop over all nodes goes through here, so nodes_visited() sees it.
  template <typename Fn>
  void ForEachNode(Fn fn) {
    nodes_visited_ += nodes_.size();
    for (auto& [id, n] : nodes_) fn(id, n);
  }
  template <typename Fn>
  void ForEachNode(Fn fn) const {
    nodes_visited_ += nodes_.size();
    for (const auto& [id, n] : nodes_) fn(id, n);
  }

  // Why a join for the static rank `holder` holds is refused (never OK): Aborted while the claim
  // of another address waits for the holder's lease, AlreadyExists for a duplicate.
  absl::Status RefuseClaim(Node& holder, const NodeInfo& joiner, TimePoint now);
  void TouchAll();                      // every node's view changed: O(1)
  void Touch(const std::string& node);  // only this node's
  void MaybeFormRound(TimePoint now, bool reforming);
  void FormRound(std::vector<std::string> members);
  // The places `members` (in order of preference) held in the round before this service started
  // (NodeInfo::last_group_rank), by group rank, "" where none: the first claim of a place wins it.
  std::vector<std::string> PlacesClaimed(const std::vector<std::string>& members) const;
  void EndRound(const std::string& reason, TimePoint now);
  void ClearRound(NodeRole everyone);  // no members, no assignments, every node in `everyone`
  void Fail(const std::string& reason, std::vector<FailureInfo> failures, int exit_code);
  void DropNode(Nodes::iterator it, const std::string& why, TimePoint now);
  void Renew(Nodes::iterator it, TimePoint now);
  TimePoint Expiry(const Node& n) const;
  void SayWhoIsAwaited();  // static mode, forming: names the ranks the round waits for
  bool Terminal() const;
  // By join order; in a service started again (no round of its own yet), the last round's
  // spares after the others.
  std::vector<std::string> FirstJoined(size_t count) const;
  // It saw rounds but held no place in the newest: a spare of the round before this service
  // started, when it joins a service started again.
  static bool WasASpare(const NodeInfo& n) { return n.rounds_seen > 0 && n.last_group_rank < 0; }
  // No round of its own yet, and a joiner ran rounds of an earlier instance: its host's dtrun was
  // started again.
  bool StartedAgain() const { return last_members_.empty() && rounds_seen_ > 0; }
  // A service started again waits this long for the last round's members. One that is alive joins
  // at its next keep-alive; one silent for a lease since its last contact with the earlier
  // instance, which was before this one started, would have been dropped by a running service.
  TimePoint LastRoundAwaitedUntil() const { return started_ + options_.lease(); }
  Node* Member(const std::string& node_id);  // nullptr unless in the current round

  RendezvousOptions options_;
  // The node table and its indexes, kept in step by Join, Renew and DropNode: every per-node call
  // is a lookup (O(log N)); only round changes walk all nodes.
  Nodes nodes_;
  std::map<uint64_t, std::string> by_join_;                 // join order
  std::map<int, std::string> by_rank_;                      // static ranks of live nodes
  std::multimap<std::string, std::string> by_addr_;         // the nodes at each address
  std::set<std::pair<TimePoint, std::string>> by_contact_;  // lease order: the first expires first
  std::map<int, NodeInfo> last_known_;  // static rank → the node that last held it
  uint64_t next_seq_ = 0;
  uint64_t version_ = 1;
  uint64_t all_version_ = 0;  // version_ when every node's view last changed
  bool program_parks_ = false;  // sticky: see NodeView::program_parks
  straggler::StragglerWatch stragglers_;  // the running round's; reset by FormRound
  bool straggler_replaced_ = false;       // --on-straggler replace acts once per job
  TimePoint next_replace_look_{};
  std::optional<status::StragglerStatus> straggler_;
  std::string straggler_member_;  // the id of the member running straggler_ (or that is it)
  void WatchForStragglers(const Node& node, const status::NodeStatus& progress);
  JobPhase phase_ = JobPhase::kForming;
  int64_t round_ = -1;
  int64_t rounds_seen_ = 0;  // the most any joiner has seen (NodeInfo::rounds_seen): rounds go above it
  int restarts_used_ = 0;
  std::vector<std::string> members_;  // current round, by group rank
  int world_size_ = 0;                // their workers
  // The last round's members by group rank: an elastic round keeps each returning node's group
  // rank, so its ranks (and their snapshots) stay where they were and a newcomer takes the gap.
  std::vector<std::string> last_members_;
  int former_spares_ = 0;  // nodes in nodes_ for which WasASpare
  // By group rank of the last round: the ranks it had and the nodes that were sent their copies
  // in the last rounds, newest first. A round with the same ranks at a group rank names those
  // still in the job as where its copies are (Assignment::copies_at).
  struct CopiesOfRanks {
    int rank_offset = 0;
    int nproc = 0;
    int world_size = 0;
    std::vector<std::string> holders;  // node ids, at most kCopyHolders
  };
  std::vector<CopiesOfRanks> copies_;
  void AssignBuddies(int world);
  size_t succeeded_ = 0;               // members that reported success this round
  const TimePoint started_;            // this instance of the service
  TimePoint forming_since_;
  std::optional<TimePoint> min_reached_at_;  // elastic last call
  std::string reason_;
  std::string awaited_names_;  // the static ranks a forming round lacks, named (SayWhoIsAwaited)
  std::vector<FailureInfo> failures_;
  int exit_code_ = 0;
  int64_t stacks_round_ = -1;
  Touched touched_;
  mutable uint64_t nodes_visited_ = 0;
};

}  // namespace dtrun::rdzv
