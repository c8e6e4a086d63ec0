#include "rendezvous/rendezvous_state.h"

#include <functional>

#include "gtest/gtest.h"
#include "rendezvous/workers_store.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class RendezvousStateTest : public ::testing::Test {
 protected:
  TimePoint now_ = TimePoint() + seconds(1000);

  static RendezvousOptions Static(int n, int max_restarts = 0) {
    RendezvousOptions o;
    o.min_nodes = o.max_nodes = n;
    o.static_ranks = true;
    o.max_restarts = max_restarts;
    return o;
  }
  static RendezvousOptions Elastic(int lo, int hi) {
    RendezvousOptions o;
    o.min_nodes = lo;
    o.max_nodes = hi;
    o.static_ranks = false;
    o.last_call_timeout = seconds(2);
    return o;
  }
  static NodeInfo Node(const std::string& host, int rank = -1, int nproc = 2) {
    return NodeInfo{host, nproc, host + "-addr", 1000 + std::max(rank, 0), rank, "", 0};
  }
  // `node` (of `nproc` workers) pushes 25 steps of waits for the ranks its assignment gave it,
  // `wait(rank)` each.
  static void PushWaits(RendezvousState& s, const std::string& node, int nproc, const std::function<double(int)>& wait) {
    const NodeView v = *s.View(node);
    status::NodeStatus p;
    p.round = v.round;
    p.ranks.resize(static_cast<size_t>(nproc));
    for (int l = 0; l < nproc; ++l) {
      const int rank = v.assignment->rank_offset + l;
      p.ranks[l].global_rank = rank;
      p.ranks[l].local_rank = l;
      for (int64_t step = 1; step <= 25; ++step) p.ranks[l].waits.push_back({step, wait(rank), 0.3});
    }
    ASSERT_TRUE(s.SetProgress(node, p).ok());
  }
  std::string MustJoin(RendezvousState& s, const NodeInfo& n) {
    auto id = s.Join(n, now_);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }
  void Advance(RendezvousState& s, milliseconds d) {
    now_ += d;
    s.Tick(now_);
  }
};

TEST_F(RendezvousStateTest, StaticRoundFormsWhenEveryRankHasJoined) {
  RendezvousState s(Static(2), now_);
  std::string b = MustJoin(s, Node("b", 1, 3));
  EXPECT_EQ(s.View(b)->phase, JobPhase::kForming);
  std::string a = MustJoin(s, Node("a", 0, 2));
  NodeView va = *s.View(a), vb = *s.View(b);
  ASSERT_EQ(va.phase, JobPhase::kRunning);
  EXPECT_EQ(va.round, 0);
  EXPECT_EQ(va.assignment->group_rank, 0);
  EXPECT_EQ(vb.assignment->group_rank, 1);
  EXPECT_EQ(vb.assignment->rank_offset, 2);  // contiguous global ranks with uneven nproc
  EXPECT_EQ(vb.assignment->world_size, 5);
  EXPECT_EQ(vb.assignment->master_addr, "a-addr");  // store of group rank 0
  EXPECT_EQ(vb.assignment->master_port, 1000);
}

// A service that shares its endpoint with the workers' store (the agent that hosts it, or
// `dtrun rdzv-server`) names no store in assignments: each agent puts in the endpoint it reaches
// the service at, so the store does not depend on which node is group rank 0.
TEST_F(RendezvousStateTest, AServiceWhoseEndpointServesTheStoreLeavesItToEachAgentsEndpoint) {
  RendezvousOptions o = Static(2);
  o.workers_store_at_endpoint = true;
  RendezvousState s(o, now_);
  std::string a = MustJoin(s, Node("a", 0));
  std::string b = MustJoin(s, Node("b", 1));
  for (const std::string& id : {a, b}) {
    const NodeView v = *s.View(id);
    ASSERT_TRUE(v.assignment.has_value());
    EXPECT_EQ(v.assignment->master_addr, "");
    EXPECT_EQ(v.assignment->master_port, 0);
  }
  Assignment placed = *s.View(b)->assignment;
  PlaceWorkersStoreAtEndpoint(placed, "rdzv.example:29400");
  EXPECT_EQ(placed.master_addr, "rdzv.example");
  EXPECT_EQ(placed.master_port, 29400);
}

TEST(PlaceWorkersStoreTest, TakesTheEndpointsHostAndPortOnlyWhereNoStoreIsNamed) {
  Assignment v6;
  PlaceWorkersStoreAtEndpoint(v6, "[fd00::1]:29511");
  EXPECT_EQ(v6.master_addr, "fd00::1");  // as MASTER_ADDR, without brackets
  EXPECT_EQ(v6.master_port, 29511);
  Assignment named;
  named.master_addr = "a-addr";
  named.master_port = 1000;
  PlaceWorkersStoreAtEndpoint(named, "rdzv.example:29400");
  EXPECT_EQ(named.master_addr, "a-addr");  // group rank 0's store, as the service said
  EXPECT_EQ(named.master_port, 1000);
  Assignment unparsed;
  PlaceWorkersStoreAtEndpoint(unparsed, "[fd00::1");
  EXPECT_EQ(unparsed.master_addr, "");
  EXPECT_EQ(unparsed.master_port, 0);
}

TEST_F(RendezvousStateTest, RejectsDuplicateAndOutOfRangeStaticRanks) {
  RendezvousState s(Static(2), now_);
  MustJoin(s, Node("a", 0));
  NodeInfo beside = Node("a2", 0);
  beside.store_addr = "a-addr";  // another agent at a's address, which says a's is alive
  EXPECT_EQ(s.Join(beside, now_).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Join(Node("c", 2), now_).status().code(), absl::StatusCode::kInvalidArgument);
  // A node's claim of workers sizes per-rank bookkeeping: out of range, it is refused (fuzzer finding).
  absl::StatusOr<std::string> huge = s.Join(Node("h", 1, 168'000'000), now_);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("--nproc-per-node must be 0..1024"), std::string::npos) << huge.status();
  EXPECT_EQ(s.Join(Node("n", 1, -1), now_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.View(MustJoin(s, Node("b", 1)))->phase, JobPhase::kRunning);  // the job is undisturbed
}

TEST_F(RendezvousStateTest, EveryChangeBumpsTheVersion) {
  RendezvousState s(Static(2), now_);
  uint64_t v0 = s.version();
  std::string a = MustJoin(s, Node("a", 0));
  EXPECT_GT(s.version(), v0);
  uint64_t v1 = s.version();
  EXPECT_TRUE(s.KeepAlive(a, now_).ok());
  EXPECT_EQ(s.version(), v1);  // keep-alives change nothing observable
}

TEST_F(RendezvousStateTest, AJoinElsewhereDoesNotChangeAWaitingNodesView) {
  RendezvousState s(Elastic(3, 3), now_);
  std::string a = MustJoin(s, Node("a"));
  uint64_t before = s.View(a)->version;
  s.TakeTouched();
  MustJoin(s, Node("b"));
  EXPECT_EQ(s.View(a)->version, before);
  RendezvousState::Touched t = s.TakeTouched();
  EXPECT_FALSE(t.all);
  EXPECT_EQ(t.nodes.size(), 1u);
  MustJoin(s, Node("c"));  // the round forms: everyone's view changes
  EXPECT_GT(s.View(a)->version, before);
  EXPECT_TRUE(s.TakeTouched().all);
}

TEST_F(RendezvousStateTest, FailureWithBudgetStartsTheNextRoundForEveryone) {
  RendezvousState s(Static(2, /*max_restarts=*/1), now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  FailureInfo f;
  f.host = "b";
  f.global_rank = 3;
  f.exit_code = 7;
  ASSERT_TRUE(s.ReportFailure(b, 0, {f}, now_).ok());
  NodeView v = *s.View(a);
  EXPECT_EQ(v.phase, JobPhase::kRunning);
  EXPECT_EQ(v.round, 1);
  EXPECT_NE(v.reason.find("worker rank 3 on node 1 (b, b-addr) failed (exit code 7)"), std::string::npos) << v.reason;
}

TEST_F(RendezvousStateTest, TheRoundsEndSaysAWorkerRanOutOfMemory) {
  RendezvousState s(Static(2, /*max_restarts=*/1), now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  FailureInfo f;
  f.host = "b";
  f.global_rank = 2;
  f.signal = 9;
  f.kind = FailureKind::kOomKilled;
  ASSERT_TRUE(s.ReportFailure(b, 0, {f}, now_).ok());
  EXPECT_NE(s.View(a)->reason.find("failed (signal 9: out of memory, killed by the kernel); restart 1/1"), std::string::npos)
      << s.View(a)->reason;
}

TEST_F(RendezvousStateTest, TheRoundsEndGivesTheFirstLineOfTheWorkersError) {
  RendezvousState s(Static(2, /*max_restarts=*/2), now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  FailureInfo f;
  f.host = "b";
  f.global_rank = 3;
  f.exit_code = 1;
  f.message = "ValueError: bad\x1b[2J batch 7\nsecond line";
  ASSERT_TRUE(s.ReportFailure(b, 0, {f}, now_).ok());
  EXPECT_NE(s.View(a)->reason.find("failed (exit code 1: ValueError: bad?[2J batch 7); restart 1/2"), std::string::npos)
      << s.View(a)->reason;
  f.message = std::string(5000, 'x');  // a long line is cut
  ASSERT_TRUE(s.ReportFailure(b, 1, {f}, now_).ok());
  EXPECT_NE(s.View(a)->reason.find("failed (exit code 1: " + std::string(200, 'x') + "...); restart 2/2"),
            std::string::npos)
      << s.View(a)->reason;
}

TEST_F(RendezvousStateTest, RejectsReportsFromAStaleRound) {
  RendezvousState s(Static(2, 5), now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  ASSERT_TRUE(s.ReportFailure(b, 0, {FailureInfo{}}, now_).ok());
  EXPECT_EQ(s.ReportFailure(a, 0, {FailureInfo{}}, now_).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.ReportSuccess(a, 0, now_).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.Summary().restarts_used, 1);  // counted once per job, not per node
}

TEST_F(RendezvousStateTest, SpentBudgetFailsTheJobWithTheRootCause) {
  RendezvousState s(Static(2, 0), now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  FailureInfo f;
  f.host = "b";
  f.signal = 9;
  ASSERT_TRUE(s.ReportFailure(b, 0, {f}, now_).ok());
  NodeView v = *s.View(a);
  EXPECT_EQ(v.phase, JobPhase::kFailed);
  EXPECT_EQ(v.exit_code, 137);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_EQ(v.failures[0].host, "b");
  EXPECT_EQ(s.Join(Node("late", 0), now_).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RendezvousStateTest, SucceedsWhenEveryMemberReportsSuccess) {
  RendezvousState s(Static(2), now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  ASSERT_TRUE(s.ReportSuccess(a, 0, now_).ok());
  EXPECT_EQ(s.View(a)->phase, JobPhase::kRunning);
  ASSERT_TRUE(s.Leave(a, now_).ok());  // a finished node leaving does not end the round
  EXPECT_EQ(s.View(b)->phase, JobPhase::kRunning);
  ASSERT_TRUE(s.ReportSuccess(b, 0, now_).ok());
  EXPECT_EQ(s.View(b)->phase, JobPhase::kSucceeded);
}

TEST_F(RendezvousStateTest, LostStaticNodeEndsTheRoundAndIsAwaitedUntilJoinTimeout) {
  RendezvousOptions o = Static(2);
  o.keep_alive_interval = seconds(1);
  o.keep_alive_max_attempt = 3;
  o.join_timeout = seconds(10);
  RendezvousState s(o, now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  for (int i = 0; i < 2; ++i) {
    Advance(s, milliseconds(1500));
    ASSERT_TRUE(s.KeepAlive(a, now_).ok());
  }
  Advance(s, milliseconds(100));  // b's lease (3 s) has expired
  NodeView v = *s.View(a);
  EXPECT_EQ(v.phase, JobPhase::kForming);
  EXPECT_NE(v.reason.find("node 1 (b, b-addr) lost"), std::string::npos) << v.reason;
  // It says whom it waits for, how long, and how to stop, apart from why the round ended.
  EXPECT_EQ(v.awaited, "node 1 (b, b-addr) to come back, up to 10 s (join_timeout); Ctrl-C to stop");
  EXPECT_EQ(v.reason.find("waiting"), std::string::npos) << v.reason;
  EXPECT_EQ(s.KeepAlive(b, now_).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(s.NextDeadline().has_value());
  // b comes back: a new round forms with it.
  std::string b2 = MustJoin(s, Node("b", 1));
  EXPECT_EQ(s.View(b2)->round, 1);
  EXPECT_EQ(s.View(b2)->awaited, "");  // running again: nobody is awaited
}

// A node's dtrun killed and started again at once (a supervisor's restart) joins while its dead
// predecessor still holds the rank: it takes the rank over and a new round forms at once, where it
// used to be refused until the lease lapsed. Only from the same address, and only when it says no
// other agent of the rank lives on its machine; anything else is a duplicate --node-rank.
TEST_F(RendezvousStateTest, ANodeStartedAgainTakesItsRankFromItsDeadPredecessorAtOnce) {
  RendezvousOptions o = Static(2);
  o.keep_alive_interval = seconds(5);
  o.keep_alive_max_attempt = 3;
  RendezvousState s(o, now_);
  const std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  ASSERT_EQ(s.View(a)->round, 0);

  NodeInfo again = Node("b", 1);
  EXPECT_EQ(s.Join(again, now_).status().code(), absl::StatusCode::kAlreadyExists);  // not said dead
  NodeInfo elsewhere = Node("b2", 1);
  elsewhere.predecessor_dead = true;
  // Another machine knows nothing of b's agent: it claims the rank (below), and takes nothing now.
  EXPECT_EQ(s.Join(elsewhere, now_).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.View(a)->round, 0);  // neither disturbed the round

  Advance(s, seconds(1));  // well within b's 15 s lease
  again.predecessor_dead = true;
  NodeInfo refused = again;  // a join refused for another reason drops nothing
  refused.nproc = -1;
  EXPECT_EQ(s.Join(refused, now_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.KeepAlive(b, now_).ok());
  const std::string b2 = MustJoin(s, again);
  EXPECT_EQ(s.KeepAlive(b, now_).code(), absl::StatusCode::kNotFound);  // the predecessor is out
  const NodeView v = *s.View(b2);
  EXPECT_EQ(v.phase, JobPhase::kRunning);
  EXPECT_EQ(v.round, 1);
  EXPECT_EQ(v.assignment->group_rank, 1);
  EXPECT_NE(v.reason.find("node 1 (b, b-addr) was started again: its earlier agent is gone"), std::string::npos)
      << v.reason;
  EXPECT_EQ(s.View(a)->round, 1);
}

// A node started again on another machine (a rescheduled pod) asks for its static rank while the
// dead holder's lease runs: it is told to wait (Aborted, asking again), and takes the rank when the
// lease runs out, where it used to be refused as a duplicate and exit. A holder heard from after
// the claim began is alive: the claimant is then a duplicate, refused.
TEST_F(RendezvousStateTest, AStaticRankClaimedFromAnotherAddressWaitsForTheSilentHoldersLease) {
  RendezvousOptions o = Static(2);
  o.keep_alive_interval = seconds(5);
  o.keep_alive_max_attempt = 3;
  RendezvousState s(o, now_);
  const TimePoint start = now_;
  const std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  NodeInfo moved = Node("c", 1);  // rank 1, at c-addr

  // b is dead: the claim waits, asked again every half second, until b's lease runs out.
  Advance(s, seconds(2));
  absl::StatusOr<std::string> wait = s.Join(moved, now_);
  ASSERT_EQ(wait.status().code(), absl::StatusCode::kAborted) << wait.status();
  EXPECT_NE(
      wait.status().message().find("node rank 1 is held by node 1 (b, b-addr), silent for 2.0 s: this node "
                                   "takes the rank if that one stays silent until its lease runs out (in 13.0 s)"),
      std::string::npos)
      << wait.status();
  ASSERT_TRUE(s.KeepAlive(a, now_).ok());
  while (now_ < start + seconds(14)) {
    Advance(s, kClaimRetryDelay);
    ASSERT_TRUE(s.KeepAlive(a, now_).ok());
    ASSERT_EQ(s.Join(moved, now_).status().code(), absl::StatusCode::kAborted);
  }
  Advance(s, seconds(1));  // 15 s: b's lease is over
  EXPECT_EQ(s.KeepAlive(b, now_).code(), absl::StatusCode::kNotFound);
  const std::string c = MustJoin(s, moved);
  const NodeView v = *s.View(c);
  EXPECT_EQ(v.phase, JobPhase::kRunning);
  EXPECT_EQ(v.round, 1);
  EXPECT_EQ(v.assignment->group_rank, 1);

  // c is alive: a claim from d waits only until c is heard from, then is refused as a duplicate.
  NodeInfo dup = Node("d", 1);
  Advance(s, seconds(1));
  ASSERT_TRUE(s.KeepAlive(a, now_).ok());
  EXPECT_EQ(s.Join(dup, now_).status().code(), absl::StatusCode::kAborted);
  Advance(s, kClaimRetryDelay);
  ASSERT_TRUE(s.KeepAlive(c, now_).ok());
  absl::StatusOr<std::string> refused = s.Join(dup, now_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("node rank 1 has already joined from node 1 (c, c-addr), which is alive "
                                            "(heard from 0.5 s after this node asked); give every node its own "
                                            "--node-rank"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(s.View(c)->round, 1);  // the running round was not disturbed

  // That claim is settled, and one left off for longer than kClaimForgottenAfter is over: c's
  // contact since then does not make a new claimant a duplicate at its first ask.
  EXPECT_EQ(s.Join(dup, now_).status().code(), absl::StatusCode::kAborted);
  Advance(s, kClaimForgottenAfter + seconds(1));
  ASSERT_TRUE(s.KeepAlive(a, now_).ok());
  ASSERT_TRUE(s.KeepAlive(c, now_).ok());
  Advance(s, seconds(1));
  EXPECT_EQ(s.Join(dup, now_).status().code(), absl::StatusCode::kAborted);
}

// The service's host started again: a new instance of the service, whose nodes join again saying
// which rounds they saw. Its first round is numbered above them, so no agent takes it for the round
// its workers already run (a report of that old round is then refused as stale), and its node ids
// are its own, so an id of the earlier instance is unknown here (the agent joins again).
TEST_F(RendezvousStateTest, AServiceStartedAgainNumbersItsRoundsAboveThoseItsNodesSaw) {
  RendezvousOptions o = Static(2);
  o.instance = "i2";
  RendezvousState s(o, now_);
  EXPECT_EQ(s.KeepAlive("node1-b", now_).code(), absl::StatusCode::kNotFound);  // an id of the old one
  NodeInfo b = Node("b", 1);
  b.rounds_seen = 4;  // it ran round 3
  const std::string a_id = MustJoin(s, Node("a", 0)), b_id = MustJoin(s, b);
  EXPECT_EQ(b_id.find("node1.i2-"), 0u) << b_id;
  const NodeView v = *s.View(b_id);
  EXPECT_EQ(v.phase, JobPhase::kRunning);
  EXPECT_EQ(v.round, 4);
  EXPECT_EQ(v.assignment->round, 4);
  FailureInfo f;
  EXPECT_EQ(s.ReportFailure(b_id, 3, {f}, now_).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.View(a_id)->round, 4);

  NodeInfo wild = Node("c", 1);
  wild.rounds_seen = int64_t{1} << 62;  // bytes from the network: the round counter must not wrap
  EXPECT_EQ(s.Join(wild, now_).status().code(), absl::StatusCode::kInvalidArgument);
  wild.rounds_seen = -1;
  EXPECT_EQ(s.Join(wild, now_).status().code(), absl::StatusCode::kInvalidArgument);
}

// A service started again (its host's dtrun restarted) has no round of its own to keep places
// from: each node that ran the last round says where it was, and gets that place again before
// hints and join order. Otherwise the restarted host's new agent, which joins its own service
// first, would take group rank 0 and shift every survivor's ranks away from their in-memory
// snapshots (and, with peers off, from the only copies of them).
TEST_F(RendezvousStateTest, AServiceStartedAgainGivesEachNodeThePlaceItHeldInTheLastRound) {
  RendezvousOptions o = Elastic(3, 3);
  o.instance = "i2";
  RendezvousState s(o, now_);
  NodeInfo c = Node("c"), b = Node("b", /*hint=*/0);
  c.rounds_seen = b.rounds_seen = 5;
  c.last_group_rank = 2;
  b.last_group_rank = 1;  // its place beats its hint
  const std::string host = MustJoin(s, Node("host")), c_id = MustJoin(s, c), b_id = MustJoin(s, b);
  ASSERT_EQ(s.View(b_id)->phase, JobPhase::kRunning);
  EXPECT_EQ(s.View(host)->assignment->group_rank, 0);  // the place nobody claimed
  EXPECT_EQ(s.View(b_id)->assignment->group_rank, 1);
  EXPECT_EQ(s.View(c_id)->assignment->group_rank, 2);
  EXPECT_EQ(s.View(c_id)->assignment->rank_offset, 4);

  // A place past the new round, or claimed by an earlier joiner, is no claim: join order.
  RendezvousState t(Elastic(2, 2), now_);
  NodeInfo far = Node("far"), same = Node("same"), again = Node("again");
  far.last_group_rank = 7;
  same.last_group_rank = again.last_group_rank = 1;
  const std::string far_id = MustJoin(t, far), same_id = MustJoin(t, same);
  EXPECT_EQ(t.View(far_id)->assignment->group_rank, 0);
  EXPECT_EQ(t.View(same_id)->assignment->group_rank, 1);
  // Once this service ran a round, its own places count, not what a joiner says.
  ASSERT_TRUE(t.Leave(same_id, now_).ok());
  const std::string again_id = MustJoin(t, [&] {
    NodeInfo n = again;
    n.last_group_rank = 0;
    return n;
  }());
  EXPECT_EQ(t.View(far_id)->assignment->group_rank, 0);
  EXPECT_EQ(t.View(again_id)->assignment->group_rank, 1);
}

// The last round's spare joins the service started again before a member that is on its way: at
// the job's maximum it would take that member's place (and the member's ranks would move away from
// their snapshots). It waits for the members, and is taken at last call if one never comes.
TEST_F(RendezvousStateTest, AServiceStartedAgainTakesTheLastRoundsSpareAfterItsMembersOrAtLastCall) {
  RendezvousOptions o = Elastic(2, 2);
  o.instance = "i2";
  NodeInfo spare = Node("spare"), b = Node("b");
  spare.rounds_seen = b.rounds_seen = 4;
  b.last_group_rank = 1;  // the spare held no place
  RendezvousState s(o, now_);
  const std::string host = MustJoin(s, Node("host")), spare_id = MustJoin(s, spare);
  EXPECT_EQ(s.View(host)->phase, JobPhase::kForming);  // two nodes, one of them the spare
  const std::string b_id = MustJoin(s, b);
  ASSERT_EQ(s.View(b_id)->phase, JobPhase::kRunning);
  EXPECT_EQ(s.View(host)->assignment->group_rank, 0);
  EXPECT_EQ(s.View(b_id)->assignment->group_rank, 1);
  EXPECT_EQ(s.View(spare_id)->role, NodeRole::kSpare);

  RendezvousState t(o, now_);  // b never comes back
  const std::string host2 = MustJoin(t, Node("host")), spare2 = MustJoin(t, spare);
  Advance(t, milliseconds(1999));
  EXPECT_EQ(t.View(host2)->phase, JobPhase::kForming);
  Advance(t, milliseconds(1));  // last_call_timeout
  ASSERT_EQ(t.View(spare2)->phase, JobPhase::kRunning);
  EXPECT_EQ(t.View(spare2)->role, NodeRole::kMember);
  EXPECT_EQ(t.View(host2)->assignment->group_rank, 0);
}

// A member lost together with the service's host (a rack, a power feed) never joins the service
// started again. It waits for the last round's members one lease from its start, as long as a
// running service would have given the lost one, and then forms without it: the spare takes the
// place at once, not at last call.
TEST_F(RendezvousStateTest, AServiceStartedAgainFormsALeaseAfterItStartedWithoutAMemberThatIsNotBack) {
  RendezvousOptions o = Elastic(2, 3);
  o.instance = "i2";
  o.last_call_timeout = seconds(30);
  o.keep_alive_interval = milliseconds(500);
  o.keep_alive_max_attempt = 4;  // a lease of 2 s
  NodeInfo spare = Node("spare"), b = Node("b");
  spare.rounds_seen = b.rounds_seen = 4;
  b.last_group_rank = 1;  // c, at group rank 2, was lost with the host
  const TimePoint started = now_;
  RendezvousState s(o, now_);
  Advance(s, milliseconds(300));
  const std::string host = MustJoin(s, Node("host")), spare_id = MustJoin(s, spare), b_id = MustJoin(s, b);
  EXPECT_EQ(s.NextDeadline(), started + seconds(2));
  Advance(s, milliseconds(1699));
  EXPECT_EQ(s.View(host)->phase, JobPhase::kForming);  // c may still be on its way
  Advance(s, milliseconds(1));
  ASSERT_EQ(s.View(spare_id)->phase, JobPhase::kRunning);
  EXPECT_EQ(s.View(b_id)->assignment->group_rank, 1);  // the survivor keeps its place
  EXPECT_EQ(s.View(spare_id)->role, NodeRole::kMember);
  EXPECT_EQ(s.View(spare_id)->assignment->group_rank, 2);

  // Without a spare, the same: the survivors go on at the job's minimum a lease after the start.
  now_ = started;
  RendezvousState t(o, now_);
  Advance(t, milliseconds(300));
  MustJoin(t, Node("host"));
  const std::string b2 = MustJoin(t, b);
  EXPECT_EQ(t.NextDeadline(), started + seconds(2));
  Advance(t, milliseconds(1700));
  ASSERT_EQ(t.View(b2)->phase, JobPhase::kRunning);
  EXPECT_EQ(t.View(b2)->assignment->group_rank, 1);
  EXPECT_EQ(t.View(b2)->assignment->world_size, 4);

  // A service that never had an earlier instance still waits out last call at its minimum.
  RendezvousState fresh(o, now_);
  const std::string x = MustJoin(fresh, Node("x")), y = MustJoin(fresh, Node("y"));
  for (int i = 0; i < 29; ++i) {
    Advance(fresh, seconds(1));
    ASSERT_TRUE(fresh.KeepAlive(x, now_).ok());
    ASSERT_TRUE(fresh.KeepAlive(y, now_).ok());
  }
  EXPECT_EQ(fresh.View(x)->phase, JobPhase::kForming);
  Advance(fresh, seconds(1));
  EXPECT_EQ(fresh.View(y)->phase, JobPhase::kRunning);
}

// The budget is the job's: a service started again (its host's dtrun restarted) goes on from the
// restarts its nodes saw spent, so a job that crashes and takes its host down with it still ends.
TEST_F(RendezvousStateTest, AServiceStartedAgainGoesOnFromTheRestartsItsNodesSawSpent) {
  RendezvousOptions o = Static(2, /*max_restarts=*/3);
  o.instance = "i2";
  RendezvousState s(o, now_);
  NodeInfo a = Node("a", 0), b = Node("b", 1);
  a.rounds_seen = b.rounds_seen = 3;
  a.restarts_used = 1;  // an older view
  b.restarts_used = 2;
  const std::string a_id = MustJoin(s, a), b_id = MustJoin(s, b);
  EXPECT_EQ(s.View(a_id)->restarts_used, 2);
  FailureInfo f;
  ASSERT_TRUE(s.ReportFailure(a_id, 3, {f}, now_).ok());
  EXPECT_NE(s.View(a_id)->reason.find("restart 3/3"), std::string::npos) << s.View(a_id)->reason;
  EXPECT_EQ(s.View(b_id)->restarts_used, 3);
  ASSERT_TRUE(s.ReportFailure(b_id, 4, {f}, now_).ok());
  EXPECT_EQ(s.View(a_id)->phase, JobPhase::kFailed);
  EXPECT_NE(s.View(a_id)->reason.find("no restarts left (--max-restarts 3)"), std::string::npos)
      << s.View(a_id)->reason;

  RendezvousState fresh(o, now_);
  NodeInfo liar = Node("c", 0);
  liar.rounds_seen = 2;
  liar.restarts_used = 3;  // more restarts than rounds: it would spend the others' budget
  absl::StatusOr<std::string> refused = fresh.Join(liar, now_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("3 restarts in 2 rounds"), std::string::npos) << refused.status();
  liar.restarts_used = -1;
  EXPECT_EQ(fresh.Join(liar, now_).status().code(), absl::StatusCode::kInvalidArgument);
}

// Elastic: the agent started again on a machine with no other live agent of the run replaces
// whatever the service holds at its address, and the round re-forms with it at once (at MAX it
// would otherwise wait as a spare, and the round re-form with the dead node, joined earlier).
TEST_F(RendezvousStateTest, AnElasticNodeStartedAgainReplacesTheDeadAgentAtItsAddressAtOnce) {
  RendezvousOptions o = Elastic(2, 2);
  o.keep_alive_interval = seconds(5);
  o.keep_alive_max_attempt = 3;
  RendezvousState s(o, now_);
  const std::string a = MustJoin(s, Node("a")), b = MustJoin(s, Node("b"));
  ASSERT_EQ(s.View(a)->round, 0);
  // Another live agent at b's address (the flag unset): a spare, nothing dropped.
  const std::string beside = MustJoin(s, Node("b"));
  EXPECT_EQ(s.View(beside)->role, NodeRole::kSpare);
  EXPECT_EQ(s.View(a)->round, 0);
  ASSERT_TRUE(s.Leave(beside, now_).ok());

  Advance(s, seconds(1));
  NodeInfo again = Node("b");
  again.predecessor_dead = true;
  const std::string b2 = MustJoin(s, again);
  EXPECT_EQ(s.KeepAlive(b, now_).code(), absl::StatusCode::kNotFound);
  const NodeView v = *s.View(b2);
  EXPECT_EQ(v.phase, JobPhase::kRunning);
  EXPECT_EQ(v.round, 1);
  EXPECT_EQ(v.role, NodeRole::kMember);
  EXPECT_NE(v.reason.find("node b (b-addr) was started again: its earlier agent is gone"), std::string::npos)
      << v.reason;
  // A first agent at a new address drops nothing.
  NodeInfo fresh = Node("c");
  fresh.predecessor_dead = true;
  MustJoin(s, fresh);
  EXPECT_EQ(s.View(a)->round, 1);
}

TEST_F(RendezvousStateTest, AfterTheEndANodeThatMissesOneKeepAliveIsDroppedSoTheHostCanExit) {
  RendezvousOptions o = Static(2);
  o.keep_alive_interval = seconds(4);
  o.keep_alive_max_attempt = 3;
  RendezvousState s(o, now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  Advance(s, seconds(1));
  FailureInfo f;
  f.host = "a";
  f.exit_code = 1;
  ASSERT_TRUE(s.ReportFailure(a, 0, {f}, now_).ok());  // no restarts: the job is over
  ASSERT_EQ(s.View(a)->phase, JobPhase::kFailed);
  // Leases still run out after the end, but after one missed keep-alive, not three.
  ASSERT_TRUE(s.NextDeadline().has_value());
  EXPECT_EQ(*s.NextDeadline(), now_ - seconds(1) + seconds(5));
  ASSERT_TRUE(s.KeepAlive(a, now_).ok());  // a is alive; b is not heard from again
  Advance(s, seconds(4));
  EXPECT_EQ(s.Summary().nodes.size(), 1u);
  ASSERT_TRUE(s.Leave(a, now_).ok());
  EXPECT_TRUE(s.Summary().nodes.empty());
  EXPECT_EQ(s.View(b)->phase, JobPhase::kFailed);  // a late reader still learns the outcome
}

TEST_F(RendezvousStateTest, StaticNodeThatNeverReturnsFailsTheJobAtJoinTimeout) {
  RendezvousOptions o = Static(2);
  o.join_timeout = seconds(5);
  RendezvousState s(o, now_);
  std::string a = MustJoin(s, Node("a", 0)), b = MustJoin(s, Node("b", 1));
  ASSERT_TRUE(s.Leave(b, now_).ok());
  for (int i = 0; i < 6; ++i) {
    Advance(s, seconds(1));
    ASSERT_TRUE(s.KeepAlive(a, now_).ok());
  }
  NodeView v = *s.View(a);
  EXPECT_EQ(v.phase, JobPhase::kFailed);
  EXPECT_NE(v.reason.find("join_timeout"), std::string::npos) << v.reason;
}

TEST_F(RendezvousStateTest, ElasticFormsAtMaxAtOnce) {
  RendezvousState s(Elastic(1, 2), now_);
  std::string a = MustJoin(s, Node("a"));
  EXPECT_EQ(s.View(a)->phase, JobPhase::kForming);
  std::string b = MustJoin(s, Node("b"));
  EXPECT_EQ(s.View(b)->phase, JobPhase::kRunning);
  EXPECT_EQ(s.View(b)->assignment->group_rank, 1);  // ranks by join order
}

// Elastic mode takes --node-rank as a preference (`dtrun -H a,b` gives each host its place in
// the list): the first round orders the nodes by it whatever order they joined in, with no hint
// after the hinted ones; a later round keeps the places the last one gave.
TEST_F(RendezvousStateTest, ElasticOrdersTheFirstRoundByTheNodesRankHintsNotTheirJoinOrder) {
  RendezvousState s(Elastic(2, 3), now_);
  std::string none = MustJoin(s, Node("none"));
  std::string b = MustJoin(s, Node("b", 1));
  std::string a = MustJoin(s, Node("a", 0));
  EXPECT_EQ(s.View(a)->assignment->group_rank, 0);
  EXPECT_EQ(s.View(b)->assignment->group_rank, 1);
  EXPECT_EQ(s.View(none)->assignment->group_rank, 2);
  EXPECT_EQ(s.View(b)->assignment->master_addr, "a-addr");
  // A hint never clashes: two nodes that ask for rank 1 both join, in join order.
  RendezvousState twice(Elastic(2, 2), now_);
  std::string first = MustJoin(twice, Node("first", 1)), second = MustJoin(twice, Node("second", 1));
  EXPECT_EQ(twice.View(first)->assignment->group_rank, 0);
  EXPECT_EQ(twice.View(second)->assignment->group_rank, 1);
  // Once a round ran, places are kept: a node that comes back with hint 0 takes the free place,
  // not rank 0 from a survivor (whose snapshots belong to its ranks).
  ASSERT_TRUE(s.Leave(a, now_).ok());
  ASSERT_TRUE(s.View(b)->assignment.has_value());
  EXPECT_EQ(s.View(b)->assignment->group_rank, 1);
  EXPECT_EQ(s.View(none)->assignment->group_rank, 0);  // the free place below b
  std::string back = MustJoin(s, Node("a", 0));
  EXPECT_EQ(s.View(back)->assignment->group_rank, 2);
  EXPECT_EQ(s.View(none)->assignment->group_rank, 0);
}

TEST_F(RendezvousStateTest, ElasticFormsAtMinAfterLastCall) {
  RendezvousState s(Elastic(2, 4), now_);
  std::string a = MustJoin(s, Node("a"));
  MustJoin(s, Node("b"));
  EXPECT_EQ(s.View(a)->phase, JobPhase::kForming);
  ASSERT_TRUE(s.NextDeadline().has_value());
  Advance(s, milliseconds(1999));
  EXPECT_EQ(s.View(a)->phase, JobPhase::kForming);
  Advance(s, milliseconds(1));
  EXPECT_EQ(s.View(a)->phase, JobPhase::kRunning);
  EXPECT_EQ(s.View(a)->assignment->group_world_size, 2);
}

TEST_F(RendezvousStateTest, ElasticLateJoinerWithRoomTriggersANewRound) {
  RendezvousState s(Elastic(1, 3), now_);
  std::string a = MustJoin(s, Node("a"));
  Advance(s, seconds(2));
  ASSERT_EQ(s.View(a)->round, 0);
  std::string b = MustJoin(s, Node("b"));
  NodeView v = *s.View(b);
  EXPECT_EQ(v.round, 1);
  EXPECT_EQ(v.assignment->group_world_size, 2);
  EXPECT_EQ(s.Summary().restarts_used, 0);  // membership changes do not spend the budget
}

TEST_F(RendezvousStateTest, ElasticSpareWaitsAndIsPromotedWhenAMemberIsLost) {
  RendezvousState s(Elastic(2, 2), now_);
  std::string a = MustJoin(s, Node("a")), b = MustJoin(s, Node("b"));
  std::string c = MustJoin(s, Node("c"));
  EXPECT_EQ(s.View(c)->role, NodeRole::kSpare);
  EXPECT_FALSE(s.View(c)->assignment.has_value());
  EXPECT_EQ(s.View(a)->round, 0);  // a spare does not disturb the running round
  ASSERT_TRUE(s.Leave(b, now_).ok());
  NodeView v = *s.View(c);
  EXPECT_EQ(v.round, 1);
  ASSERT_TRUE(v.assignment.has_value());
  EXPECT_EQ(v.assignment->group_rank, 1);
  EXPECT_EQ(s.View(a)->assignment->group_rank, 0);
}

// Warm workers: once some node's workers say their program can be parked, every node's view says
// so (a new version, so a waiting spare hears it at once), and it stays said.
TEST_F(RendezvousStateTest, ASpareLearnsThatTheProgramParksFromAnotherNodesStatus) {
  RendezvousState s(Elastic(2, 2), now_);
  std::string a = MustJoin(s, Node("a")), b = MustJoin(s, Node("b"));
  std::string c = MustJoin(s, Node("c"));
  EXPECT_FALSE(s.View(c)->program_parks);
  status::NodeStatus pushed;
  pushed.ranks.resize(2);
  ASSERT_TRUE(s.SetProgress(a, pushed).ok());
  EXPECT_FALSE(s.View(c)->program_parks);
  const uint64_t before = s.View(c)->version;
  pushed.ranks[1].warm = true;
  ASSERT_TRUE(s.SetProgress(b, pushed).ok());
  EXPECT_TRUE(s.View(c)->program_parks);
  EXPECT_GT(s.View(c)->version, before);
  pushed.ranks[1].warm = false;
  ASSERT_TRUE(s.SetProgress(b, pushed).ok());
  EXPECT_TRUE(s.View(c)->program_parks);
}

// A spare takes the lost node's group rank and the survivors keep theirs: their ranks, and the
// in-memory snapshots that belong to those ranks, stay where they are.
TEST_F(RendezvousStateTest, ElasticSpareTakesTheLostNodesGroupRankAndTheOthersKeepTheirs) {
  RendezvousState s(Elastic(3, 3), now_);
  std::string a = MustJoin(s, Node("a")), b = MustJoin(s, Node("b")), c = MustJoin(s, Node("c"));
  std::string spare = MustJoin(s, Node("spare"));
  ASSERT_EQ(s.View(b)->assignment->group_rank, 1);
  ASSERT_TRUE(s.Leave(a, now_).ok());  // group rank 0 lost: in join order b would take it
  EXPECT_EQ(s.View(b)->assignment->group_rank, 1);
  EXPECT_EQ(s.View(c)->assignment->group_rank, 2);
  EXPECT_EQ(s.View(spare)->assignment->group_rank, 0);
  EXPECT_EQ(s.View(spare)->assignment->rank_offset, 0);
  EXPECT_EQ(s.View(b)->assignment->master_addr, "spare-addr");  // the store follows group rank 0
}

// Each member's buddy is the node of the next group rank (the last one's is the first), as that
// node says it takes copies; a node alone has none.
TEST_F(RendezvousStateTest, EachMembersBuddyIsTheNextGroupRanksReplicaEndpoint) {
  RendezvousState s(Static(3), now_);
  std::vector<std::string> ids;
  for (int r = 0; r < 3; ++r) {
    NodeInfo n = Node("h" + std::to_string(r), r);
    n.replica_addr = "10.0.0." + std::to_string(r);
    n.replica_port = 7000 + r;
    ids.push_back(MustJoin(s, n));
  }
  for (int r = 0; r < 3; ++r) {
    const Assignment a = *s.View(ids[r])->assignment;
    EXPECT_EQ(a.buddy_addr, "10.0.0." + std::to_string((r + 1) % 3));
    EXPECT_EQ(a.buddy_port, 7000 + (r + 1) % 3);
  }
  RendezvousState alone(Static(1), now_);
  NodeInfo n = Node("solo", 0);
  n.replica_addr = "10.0.0.9";
  n.replica_port = 7009;
  std::string id = MustJoin(alone, n);
  EXPECT_EQ(alone.View(id)->assignment->buddy_addr, "");
}

// With failure domains a member's buddy is in another domain: two racks of consecutive group
// ranks copy to each other, and each node learns its buddy's domain.
TEST_F(RendezvousStateTest, EachMembersBuddyIsInAnotherFailureDomain) {
  RendezvousState s(Static(4), now_);
  std::vector<std::string> ids;
  for (int r = 0; r < 4; ++r) {
    NodeInfo n = Node("h" + std::to_string(r), r);
    n.replica_addr = "10.0.0." + std::to_string(r);
    n.replica_port = 7000;
    n.failure_domain = r < 2 ? "rack-a" : "rack-b";
    ids.push_back(MustJoin(s, n));
  }
  for (int r = 0; r < 4; ++r) {
    const Assignment a = *s.View(ids[r])->assignment;
    EXPECT_EQ(a.buddy_addr, "10.0.0." + std::to_string((r + 2) % 4));
    EXPECT_EQ(a.buddy_failure_domain, r < 2 ? "rack-b" : "rack-a");
    EXPECT_TRUE(a.copies_at.empty()) << "round 0: no copies anywhere yet";
  }
}

// Three racks of two; rack b (group ranks 2 and 3) is lost one node after the other, and two spares
// of a fourth rack take its ranks over. A spare's buddy is chosen for the new round's racks, but
// the copies of the ranks it took over are where the earlier rounds sent them: it is told so.
TEST_F(RendezvousStateTest, ANodeThatTookOverRanksIsToldWhereTheirCopiesWent) {
  RendezvousState s(Elastic(6, 6), now_);
  std::map<std::string, std::string> id;
  auto join = [&](const std::string& host, const std::string& rack, int addr) {
    NodeInfo n = Node(host);
    n.replica_addr = "10.0.0." + std::to_string(addr);
    n.replica_port = 7000;
    n.failure_domain = rack;
    id[host] = MustJoin(s, n);
  };
  join("a0", "a", 0), join("a1", "a", 1), join("b0", "b", 2), join("b1", "b", 3), join("c0", "c", 4),
      join("c1", "c", 5);
  join("d0", "d", 6), join("d1", "d", 7);  // spares
  ASSERT_EQ(s.View(id["b0"])->assignment->group_rank, 2);
  ASSERT_EQ(s.View(id["b0"])->assignment->buddy_addr, "10.0.0.4");  // c0
  ASSERT_EQ(s.View(id["b1"])->assignment->buddy_addr, "10.0.0.5");  // c1

  ASSERT_TRUE(s.Leave(id["b0"], now_).ok());
  const Assignment d0 = *s.View(id["d0"])->assignment;
  ASSERT_EQ(d0.group_rank, 2);
  EXPECT_EQ(d0.copies_at, (std::vector<ReplicaEndpoint>{{"10.0.0.4", 7000}})) << "b0's copies are on c0";
  EXPECT_NE(d0.buddy_addr, "10.0.0.4") << "the new round pairs rack d with another node";

  ASSERT_TRUE(s.Leave(id["b1"], now_).ok());
  const Assignment d1 = *s.View(id["d1"])->assignment;
  ASSERT_EQ(d1.group_rank, 3);
  EXPECT_EQ(d1.copies_at, (std::vector<ReplicaEndpoint>{{"10.0.0.5", 7000}})) << "b1's copies are on c1";
  EXPECT_NE(d1.buddy_failure_domain, "d");
  // d0's ranks went to its buddy of the last round and, before that, to c0.
  const Assignment d0_again = *s.View(id["d0"])->assignment;
  EXPECT_EQ(d0_again.copies_at, (std::vector<ReplicaEndpoint>{{d0.buddy_addr, 7000}, {"10.0.0.4", 7000}}));
}

// A failure domain is shown in logs and in `dtrun status`: a long one, or one with a space or a
// control character, is refused at join with the fix.
TEST_F(RendezvousStateTest, AFailureDomainThatIsNotAShortNameIsRefused) {
  RendezvousState s(Elastic(1, 2), now_);
  for (const std::string& bad : {std::string(129, 'r'), std::string("rack a"), std::string("rack\x1b[2J")}) {
    NodeInfo n = Node("a");
    n.failure_domain = bad;
    absl::StatusOr<std::string> id = s.Join(n, now_);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(id.status().message().find("--failure-domain"), std::string::npos) << id.status();
  }
  NodeInfo good = Node("a");
  good.failure_domain = std::string(128, 'r');
  EXPECT_TRUE(s.Join(good, now_).ok());
}

// A round of more workers than the store on the service's endpoint takes is said before the
// workers start, with how many would be refused and the fix; one that fits, or an unknown
// capacity, says nothing. The state counts each round's workers.
TEST_F(RendezvousStateTest, ARoundOfMoreWorkersThanTheStoreTakesIsSaidWithTheFix) {
  RendezvousState s(Static(2), now_);
  MustJoin(s, Node("a", 0, 8));
  EXPECT_EQ(s.world_size(), 0) << "no round yet";
  MustJoin(s, Node("b", 1, 8));
  ASSERT_EQ(s.world_size(), 16);
  EXPECT_EQ(StoreTooSmallWarning(s.round(), s.world_size(), 16), "");
  EXPECT_EQ(StoreTooSmallWarning(s.round(), s.world_size(), 0), "");
  const std::string warning = StoreTooSmallWarning(s.round(), s.world_size(), 10);
  EXPECT_EQ(warning.rfind("round 0 has 16 workers, and the workers' store on this host takes 10 (half its open-file "
                          "limit): the other 6 will be refused when they connect. Raise the hard limit on this host "
                          "(ulimit -Hn as root, ",
                          0),
            0u)
      << warning;
  EXPECT_NE(warning.find("`dtrun rdzv-server` on a host with a higher one"), std::string::npos) << warning;
}

TEST_F(RendezvousStateTest, ElasticContinuesWithFewerNodesWhileAtLeastMin) {
  RendezvousState s(Elastic(1, 2), now_);
  std::string a = MustJoin(s, Node("a")), b = MustJoin(s, Node("b"));
  ASSERT_TRUE(s.Leave(b, now_).ok());
  NodeView v = *s.View(a);
  EXPECT_EQ(v.phase, JobPhase::kRunning);
  EXPECT_EQ(v.assignment->world_size, 2);  // one node × 2 procs
}

TEST_F(RendezvousStateTest, KillEndsTheJobForEveryone) {
  RendezvousState s(Static(1), now_);
  std::string a = MustJoin(s, Node("a", 0));
  s.Kill("dtrun kill");
  EXPECT_EQ(s.View(a)->phase, JobPhase::kKilled);
  EXPECT_TRUE(s.NextDeadline().has_value());  // a's lease: it must leave or be dropped
  ASSERT_TRUE(s.Leave(a, now_).ok());
  EXPECT_FALSE(s.NextDeadline().has_value());
}

TEST_F(RendezvousStateTest, KeepsEachNodesLatestStatusWithinItsWorkerCount) {
  RendezvousState s(Static(2), now_);
  std::string a = MustJoin(s, Node("a", 0, 2));
  std::string b = MustJoin(s, Node("b", 1, 2));
  status::NodeStatus pushed;
  pushed.host = "liar";  // the service names nodes from their join, not from their pushes
  pushed.time_unix_ms = 5;
  pushed.ranks.resize(2);
  pushed.ranks[1].step = 7;
  ASSERT_TRUE(s.SetProgress(a, pushed).ok());
  pushed.ranks.resize(3);
  absl::Status too_many = s.SetProgress(b, pushed);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("3 rows for a node of 2"), std::string::npos) << too_many;
  EXPECT_EQ(s.SetProgress("nobody", pushed).code(), absl::StatusCode::kNotFound);
  std::vector<status::NodeStatus> all = s.Progress();
  ASSERT_EQ(all.size(), 2u);
  const status::NodeStatus& first = all[0].node_id == a ? all[0] : all[1];
  const status::NodeStatus& second = all[0].node_id == a ? all[1] : all[0];
  EXPECT_EQ(first.host, "a");
  ASSERT_EQ(first.ranks.size(), 2u);
  EXPECT_EQ(first.ranks[1].step, 7);
  EXPECT_EQ(second.host, "b");
  EXPECT_TRUE(second.ranks.empty());  // its push was refused; it still shows as a node
}

// The waits in the members' pushes name the rank that arrives last, with its node; rows for ranks a
// node was not given, pushes of another round, and a new round change nothing or start afresh.
TEST_F(RendezvousStateTest, TheMembersWaitsNameTheStragglerAndItsNode) {
  RendezvousState s(Static(2), now_);
  std::string a = MustJoin(s, Node("a", 0, 2));
  std::string b = MustJoin(s, Node("b", 1, 2));
  ASSERT_EQ(s.phase(), JobPhase::kRunning);
  auto push = [&](const std::string& node, int first_rank, int64_t round, int slow_rank) {
    status::NodeStatus p;
    p.round = round;
    p.ranks.resize(2);
    for (int l = 0; l < 2; ++l) {
      p.ranks[l].global_rank = first_rank + l;
      p.ranks[l].local_rank = l;
      for (int64_t step = 1; step <= 30; ++step) {
        p.ranks[l].waits.push_back({step, first_rank + l == slow_rank ? 0.001 : 0.060, 0.3});
      }
    }
    return s.SetProgress(node, p);
  };
  ASSERT_TRUE(push(a, 0, s.round() + 1, 3).ok());  // another round: ignored
  ASSERT_TRUE(push(b, 2, s.round() + 1, 3).ok());
  EXPECT_FALSE(s.straggler().has_value());
  ASSERT_TRUE(push(a, 2, s.round(), 1).ok());  // a claims b's ranks: ignored
  EXPECT_FALSE(s.straggler().has_value());
  ASSERT_TRUE(push(a, 0, s.round(), 3).ok());
  EXPECT_FALSE(s.straggler().has_value()) << "judged before every rank reported";
  ASSERT_TRUE(push(b, 2, s.round(), 3).ok());
  ASSERT_TRUE(s.straggler().has_value());
  EXPECT_EQ(s.straggler()->global_rank, 3);
  EXPECT_EQ(s.straggler()->host, "node 1 (b, b-addr)");
  EXPECT_EQ(s.straggler()->last_in, 20);
  EXPECT_EQ(s.straggler()->named_at_step, 20) << "the first step whose window named it";
  EXPECT_NEAR(s.straggler()->cost_share, 0.059 / 0.3, 1e-9);
  // A node lost: the round ends, and the next one starts with nobody named.
  ASSERT_TRUE(s.Leave(b, now_).ok());
  EXPECT_FALSE(s.straggler().has_value());
}

// --on-straggler replace: the node of the named rank goes to the spares, the spare takes its group
// rank and the survivors keep theirs; it happens once per job, and never without a spare.
TEST_F(RendezvousStateTest, AStragglersNodeIsSwappedForTheSpareOnce) {
  RendezvousOptions o = Elastic(2, 2);
  o.replace_stragglers = true;
  RendezvousState s(o, now_);
  std::string a = MustJoin(s, Node("a")), b = MustJoin(s, Node("b"));
  ASSERT_EQ(s.phase(), JobPhase::kRunning);
  auto name_rank_3 = [&] {
    for (const std::string& node : {a, b}) PushWaits(s, node, 2, [](int rank) { return rank == 3 ? 0.001 : 0.06; });
  };
  ASSERT_EQ(s.View(b)->assignment->group_rank, 1);
  name_rank_3();
  ASSERT_TRUE(s.straggler().has_value());
  EXPECT_FALSE(s.MaybeReplaceStraggler(now_)) << "no spare yet";
  now_ += seconds(1);  // it looks at most once a second
  std::string spare = MustJoin(s, Node("spare"));
  ASSERT_EQ(s.View(spare)->role, NodeRole::kSpare);
  const int64_t round = s.round();
  ASSERT_TRUE(s.MaybeReplaceStraggler(now_));
  EXPECT_GT(s.round(), round);
  EXPECT_EQ(s.View(b)->role, NodeRole::kSpare);
  EXPECT_EQ(s.View(spare)->assignment->group_rank, 1);
  EXPECT_EQ(s.View(a)->assignment->group_rank, 0);
  EXPECT_NE(s.View(a)->reason.find("node b (b-addr) is replaced by a spare (--on-straggler replace): rank 3"),
            std::string::npos) << s.View(a)->reason;
  // Once: a straggler named again is only named.
  b = spare;
  name_rank_3();
  ASSERT_TRUE(s.straggler().has_value());
  now_ += seconds(1);
  EXPECT_FALSE(s.MaybeReplaceStraggler(now_));
}

// Both ranks of node b are late and take turns at being last: the node is named, as a node.
TEST_F(RendezvousStateTest, AWholeSlowNodeIsNamedByItsLabel) {
  RendezvousState s(Static(2), now_);
  std::string a = MustJoin(s, Node("a", 0, 2));
  std::string b = MustJoin(s, Node("b", 1, 2));
  for (int n = 0; n < 2; ++n) {
    status::NodeStatus p;
    p.round = s.round();
    p.ranks.resize(2);
    for (int l = 0; l < 2; ++l) {
      p.ranks[l].global_rank = 2 * n + l;
      p.ranks[l].local_rank = l;
      for (int64_t step = 1; step <= 30; ++step) {
        const bool last = n == 1 && l == step % 2;  // b's ranks alternate as the very last
        p.ranks[l].waits.push_back({step, n == 1 ? (last ? 0.001 : 0.003) : 0.060, 0.3});
      }
    }
    ASSERT_TRUE(s.SetProgress(n == 0 ? a : b, p).ok());
  }
  ASSERT_TRUE(s.straggler().has_value());
  EXPECT_EQ(s.straggler()->global_rank, -1);
  EXPECT_EQ(s.straggler()->kind, status::StragglerKind::kNode);
  EXPECT_EQ(s.straggler()->host, "node 1 (b, b-addr)");
  EXPECT_NE(status::DescribeStraggler(*s.straggler()).find("the ranks of node 1 (b, b-addr) arrived last"),
            std::string::npos);
}

// Rank 5 arrives last, but the other ranks wait by where they sit on the ring, not alike: a slow
// link near rank 5's node. It is said so, and --on-straggler replace leaves the node in.
TEST_F(RendezvousStateTest, ASlowLinkIsNamedAsALinkAndNotReplaced) {
  RendezvousOptions o = Elastic(2, 2);
  o.replace_stragglers = true;
  RendezvousState s(o, now_);
  std::string a = MustJoin(s, Node("a", -1, 3)), b = MustJoin(s, Node("b", -1, 3));
  ASSERT_EQ(s.phase(), JobPhase::kRunning);
  const double ring_wait[] = {0.090, 0.130, 0.095, 0.050, 0.030, 0.010};
  for (const std::string& node : {a, b}) PushWaits(s, node, 3, [&](int rank) { return ring_wait[rank]; });
  ASSERT_TRUE(s.straggler().has_value());
  EXPECT_EQ(s.straggler()->kind, status::StragglerKind::kLink);
  EXPECT_EQ(s.straggler()->global_rank, 5);
  const std::string said = status::DescribeStraggler(*s.straggler());
  EXPECT_NE(said.find("a slow link, likely into node b (b-addr): rank 5"), std::string::npos) << said;
  EXPECT_NE(said.find("no rank is blamed"), std::string::npos) << said;
  MustJoin(s, Node("spare"));
  now_ += seconds(1);
  EXPECT_FALSE(s.MaybeReplaceStraggler(now_));
}

}  // namespace
}  // namespace dtrun::rdzv
