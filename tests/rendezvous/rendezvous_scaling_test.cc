// The scaling guard for the rendezvous state machine (issue 17), without a clock: the same calls
// are made on jobs of 1,000 and 8,000 nodes, and what each costs is counted, not timed:
//  - heap allocations (operator new is replaced in this test binary to count them), and
//  - RendezvousState::nodes_visited(), the work done over the whole node table.
// Per-node calls (joins while forming, keep-alives, status pushes, views, success reports, expiry
// checks) must cost the same at both sizes; round changes (formation, a failure's re-form, a node
// lost) may visit every node a bounded number of times, so their cost per node must be the same.
// A change that makes any of these grow with N fails here, on any machine, at any load.
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rendezvous/rendezvous_state.h"

namespace {
thread_local uint64_t t_allocations = 0;
}  // namespace

void* operator new(std::size_t n) {
  ++t_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's temporary buffer): its memory comes back through the
// delete below, which must free what it allocated (ASan checks that new and free pair up).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Cost {
  double allocations = 0;
  double visits = 0;
};

// What `calls` calls of `fn` cost, per call.
template <typename Fn>
Cost PerCall(const RendezvousState& s, int calls, Fn fn) {
  const uint64_t allocs0 = t_allocations, visits0 = s.nodes_visited();
  for (int i = 0; i < calls; ++i) fn(i);
  return Cost{double(t_allocations - allocs0) / calls, double(s.nodes_visited() - visits0) / calls};
}

// Host names long enough that every node id is a heap string at both sizes (short ones fit in
// std::string's inline buffer at 1,000 nodes and not at 8,000, which would count as growth).
NodeInfo Node(int i, int rank) {
  return NodeInfo{"gpu-node-" + std::to_string(i), 8, "10.0.0." + std::to_string(i % 250), 29500, rank, "", 0};
}

std::vector<FailureInfo> OneFailure() {
  FailureInfo f;
  f.global_rank = 3;
  f.exit_code = 1;
  f.message = "boom";
  return {f};
}

// Every measured cost of one job of `n` nodes, named.
using Costs = std::vector<std::pair<std::string, Cost>>;

Costs Measure(int n, bool static_ranks) {
  RendezvousOptions o;
  o.max_nodes = n;
  o.min_nodes = static_ranks ? n : n - 10;  // elastic: a lost node re-forms without it
  o.static_ranks = static_ranks;
  o.max_restarts = 10;
  TimePoint now = TimePoint() + seconds(1000);
  RendezvousState s(o, now);
  Costs costs;
  std::vector<std::string> ids;
  ids.reserve(n);
  const int last = 200;  // the joins measured: the last ones before the round forms
  for (int i = 0; i < n - 1 - last; ++i) ids.push_back(s.Join(Node(i, static_ranks ? i : -1), now).value());
  costs.emplace_back("join while forming", PerCall(s, last, [&](int k) {
    const int i = n - 1 - last + k;
    ids.push_back(s.Join(Node(i, static_ranks ? i : -1), now).value());
    s.TakeTouched();  // as the service does after each call
  }));
  Cost formation = PerCall(s, 1, [&](int) { ids.push_back(s.Join(Node(n - 1, static_ranks ? n - 1 : -1), now).value()); });
  EXPECT_EQ(s.phase(), JobPhase::kRunning);
  costs.emplace_back("the join that forms the round, per node", Cost{formation.allocations / n, formation.visits / n});
  s.TakeTouched();

  now += milliseconds(100);
  costs.emplace_back("keep-alive", PerCall(s, 2000, [&](int k) { ASSERT_TRUE(s.KeepAlive(ids[(k * 7919) % n], now).ok()); }));
  status::NodeStatus rows;
  rows.ranks.resize(8);
  for (auto& r : rows.ranks) r.state = "running";
  costs.emplace_back("status push", PerCall(s, 2000, [&](int k) { ASSERT_TRUE(s.SetProgress(ids[(k * 7919) % n], rows).ok()); }));
  costs.emplace_back("view", PerCall(s, 2000, [&](int k) { ASSERT_TRUE(s.View(ids[(k * 7919) % n]).ok()); }));
  costs.emplace_back("tick and next deadline", PerCall(s, 2000, [&](int) {
    s.Tick(now);
    ASSERT_TRUE(s.NextDeadline().has_value());
  }));

  // A worker fails: the round ends and re-forms at once with every node.
  Cost restart = PerCall(s, 1, [&](int) { ASSERT_TRUE(s.ReportFailure(ids[n / 2], s.round(), OneFailure(), now).ok()); });
  EXPECT_EQ(s.round(), 1);
  EXPECT_EQ(s.phase(), JobPhase::kRunning);
  costs.emplace_back("failure and re-formed round, per node", Cost{restart.allocations / n, restart.visits / n});
  s.TakeTouched();

  // A node is lost (no keep-alive): found by the timer, the round re-forms without it or, with
  // static ranks, waits for it.
  for (int i = 0; i < n; ++i) {
    if (i != n / 3) {
      EXPECT_TRUE(s.KeepAlive(ids[i], now + o.lease() / 2).ok());
    }
  }
  Cost loss = PerCall(s, 1, [&](int) { s.Tick(now + o.lease() + milliseconds(1)); });
  EXPECT_EQ(s.phase(), static_ranks ? JobPhase::kForming : JobPhase::kRunning);
  costs.emplace_back("node lost, per node", Cost{loss.allocations / n, loss.visits / n});
  if (static_ranks) return costs;

  // Every node but one reports success.
  const int64_t round = s.round();
  int reported = 0;
  costs.emplace_back("success report", PerCall(s, n - 2, [&](int) {
    if (reported == n / 3) ++reported;
    ASSERT_TRUE(s.ReportSuccess(ids[reported++], round, now).ok());
  }));
  return costs;
}

void ExpectFlat(bool static_ranks) {
  const Costs small = Measure(1000, static_ranks), large = Measure(8000, static_ranks);
  ASSERT_EQ(small.size(), large.size());
  for (size_t i = 0; i < small.size(); ++i) {
    const auto& [what, at_1k] = small[i];
    const Cost& at_8k = large[i].second;
    SCOPED_TRACE(what);
    // Vectors and strings grow geometrically: a fraction of an allocation per call may differ.
    EXPECT_LE(at_8k.allocations, at_1k.allocations + 0.5) << "allocations per call at 1k: " << at_1k.allocations;
    EXPECT_LE(at_8k.visits, at_1k.visits + 0.01) << "nodes visited per call at 1k: " << at_1k.visits;
    // Per-node calls never walk the table; a round walks it a few times.
    EXPECT_LE(at_8k.visits, 4) << "a round change walks the node table more than 4 times";
  }
}

TEST(RendezvousScalingTest, ElasticCallsCostTheSameAt1000And8000Nodes) { ExpectFlat(/*static_ranks=*/false); }

TEST(RendezvousScalingTest, StaticRankCallsCostTheSameAt1000And8000Nodes) { ExpectFlat(/*static_ranks=*/true); }

// The guard guards: a per-join walk over the table, as the old formation check did, is caught.
TEST(RendezvousScalingTest, TheCountersSeeAWalkOverEveryNode) {
  RendezvousOptions o;
  o.min_nodes = o.max_nodes = 100;
  o.static_ranks = false;
  RendezvousState s(o, TimePoint());
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) ids.push_back(s.Join(Node(i, -1), TimePoint()).value());
  Cost summary = PerCall(s, 1, [&](int) { s.Summary(); });
  EXPECT_EQ(summary.visits, 100);
  EXPECT_GE(summary.allocations, 100);  // every node's host string
}

}  // namespace
}  // namespace dtrun::rdzv
