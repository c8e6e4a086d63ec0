// The watch (straggler/straggler_watch.h) lines up waits that arrive per rank, in batches and out
// of step with each other, as the agents' status pushes bring them; it judges a step once every
// rank has reported it and never holds more than its bound.
#include "straggler/straggler_watch.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace dtrun::straggler {
namespace {

struct Wait {
  int rank;
  int64_t step;
  double wait_s;
};

// `steps` steps of `world` ranks in which `slow` arrives 60 ms after the rest (or nobody: -1),
// ordered as the pushes deliver them: each rank's steps in order, the ranks' batches interleaved.
std::vector<Wait> Pushes(int world, int64_t first, int64_t steps, int slow, std::mt19937& rng) {
  std::normal_distribution<double> noise(0.0, 0.003);
  std::vector<std::vector<Wait>> by_rank(world);
  for (int64_t s = first; s < first + steps; ++s) {
    std::vector<double> arrive(world);
    for (int r = 0; r < world; ++r) arrive[r] = 0.2 + (r == slow ? 0.06 : 0) + std::abs(noise(rng));
    const double all_in = *std::max_element(arrive.begin(), arrive.end());
    for (int r = 0; r < world; ++r) by_rank[r].push_back({r, s, all_in - arrive[r]});
  }
  std::vector<Wait> out;
  std::vector<size_t> next(world, 0);
  std::uniform_int_distribution<int> pick(0, world - 1), batch(1, 7);
  while (out.size() < static_cast<size_t>(world * steps)) {
    const int r = pick(rng);
    for (int n = batch(rng); n > 0 && next[r] < by_rank[r].size(); --n) out.push_back(by_rank[r][next[r]++]);
  }
  return out;
}

TEST(StragglerWatchTest, WaitsArrivingInInterleavedBatchesNameTheSlowRank) {
  std::mt19937 rng(7);
  StragglerWatch watch;
  watch.Reset(6);
  for (const Wait& w : Pushes(6, 1, 40, /*slow=*/4, rng)) ASSERT_TRUE(watch.Observe(w.rank, w.step, w.wait_s, 0.27).ok());
  EXPECT_EQ(watch.judged_step(), 40);
  EXPECT_EQ(watch.named_since(), 20) << "a full window of 20 steps, rank 4 last in each";
  ASSERT_TRUE(watch.Current().has_value());
  EXPECT_EQ(watch.Current()->rank, 4);
  EXPECT_GT(watch.Current()->cost_share, 0.1);
  ASSERT_TRUE(watch.Named().has_value());
  EXPECT_EQ(watch.Named()->culprit, Culprit::kRank) << "the others all wait for rank 4 alike";
  EXPECT_EQ(watch.Named()->rank, 4);
}

TEST(StragglerWatchTest, CleanStepsNameNobody) {
  std::mt19937 rng(8);
  StragglerWatch watch;
  watch.Reset(4);
  int blames = 0;
  for (const Wait& w : Pushes(4, 1, 2000, /*slow=*/-1, rng)) {
    ASSERT_TRUE(watch.Observe(w.rank, w.step, w.wait_s, 0.21).ok());
    blames += watch.Current().has_value();
  }
  EXPECT_EQ(blames, 0);
  EXPECT_EQ(watch.judged_step(), 2000);
}

// Two ranks, each last by 50 ms every other step (the margin is 13.5 ms): each is last in half of
// every window, the bar, and neither holds the job back.
TEST(StragglerWatchTest, TwoRanksThatTakeTurnsAsLastAreNotNamed) {
  StragglerWatch watch;
  watch.Reset(2);
  for (int64_t step = 1; step <= 100; ++step) {
    const int last = static_cast<int>(step % 2);
    ASSERT_TRUE(watch.Observe(last, step, 0.0, 0.27).ok());
    ASSERT_TRUE(watch.Observe(1 - last, step, 0.05, 0.27).ok());
    ASSERT_FALSE(watch.Current().has_value()) << "step " << step << ": rank " << watch.Current()->rank;
  }
  EXPECT_EQ(watch.judged_step(), 100);
}

TEST(StragglerWatchTest, AStepOneRankNeverReportsIsDroppedOnceALaterStepIsComplete) {
  StragglerWatch watch;
  watch.Reset(2);
  ASSERT_TRUE(watch.Observe(0, 1, 0.05, 0.2).ok());  // rank 1's report of step 1 was lost
  ASSERT_TRUE(watch.Observe(0, 2, 0.05, 0.2).ok());
  EXPECT_EQ(watch.judged_step(), -1);
  ASSERT_TRUE(watch.Observe(1, 2, 0.0, 0.2).ok());
  EXPECT_EQ(watch.judged_step(), 2);
  // A late report of step 1 changes nothing.
  ASSERT_TRUE(watch.Observe(1, 1, 0.0, 0.2).ok());
  EXPECT_EQ(watch.judged_step(), 2);
}

// The tests of the bookkeeping below judge windows of a step or two, too few for any count to be
// unlikely by chance: they lift that bar (alpha 1).
TEST(StragglerWatchTest, ResentAndStaleReportsAreIgnored) {
  StragglerWatch watch(JudgeOptions{.window = 2, .alpha = 1});
  watch.Reset(2);
  for (int64_t s = 1; s <= 2; ++s) {
    ASSERT_TRUE(watch.Observe(0, s, 0.05, 0.2).ok());
    ASSERT_TRUE(watch.Observe(0, s, 0.0, 0.2).ok());  // resent with another value: ignored
    ASSERT_TRUE(watch.Observe(1, s, 0.0, 0.2).ok());
  }
  ASSERT_TRUE(watch.Current().has_value());
  EXPECT_EQ(watch.Current()->rank, 1);
}

TEST(StragglerWatchTest, HostileValuesAreRefusedAndChangeNothing) {
  StragglerWatch watch(JudgeOptions{.window = 1, .alpha = 1});
  watch.Reset(2);
  EXPECT_EQ(watch.Observe(2, 1, 0.1, 0.2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(watch.Observe(-1, 1, 0.1, 0.2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(watch.Observe(0, 1, -0.1, 0.2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(watch.Observe(0, 1, 0.1, std::nan("")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(watch.Observe(0, 1, INFINITY, 0.2).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(watch.Observe(1, 1, 0.0, 0.2).ok());
  EXPECT_EQ(watch.judged_step(), -1) << "a refused report counted";
}

TEST(StragglerWatchTest, PendingStepsStayBoundedWhenOneRankNeverReports) {
  StragglerWatch watch;
  watch.Reset(3);
  for (int64_t s = 1; s <= 100000; ++s) {
    ASSERT_TRUE(watch.Observe(0, s, 0.01, 0.2).ok());
    ASSERT_TRUE(watch.Observe(1, s, 0.01, 0.2).ok());
  }
  EXPECT_EQ(watch.judged_step(), -1);
  // Rank 2 comes back: the next complete step is judged at once.
  ASSERT_TRUE(watch.Observe(0, 100001, 0.05, 0.2).ok());
  ASSERT_TRUE(watch.Observe(1, 100001, 0.05, 0.2).ok());
  ASSERT_TRUE(watch.Observe(2, 100001, 0.0, 0.2).ok());
  EXPECT_EQ(watch.judged_step(), 100001);
}

TEST(StragglerWatchTest, OneRankJudgesNothingAndResetForgetsTheRound) {
  StragglerWatch watch(JudgeOptions{.window = 1, .alpha = 1});
  watch.Reset(1);
  EXPECT_TRUE(watch.Observe(0, 1, 0.0, 0.2).ok());
  EXPECT_EQ(watch.judged_step(), -1);
  watch.Reset(2);
  ASSERT_TRUE(watch.Observe(0, 5, 0.05, 0.2).ok());
  ASSERT_TRUE(watch.Observe(1, 5, 0.0, 0.2).ok());
  ASSERT_TRUE(watch.Current().has_value());
  watch.Reset(2);
  EXPECT_FALSE(watch.Current().has_value());
  EXPECT_EQ(watch.judged_step(), -1);
  // The next round may count its steps from 1 again.
  ASSERT_TRUE(watch.Observe(0, 1, 0.05, 0.2).ok());
  ASSERT_TRUE(watch.Observe(1, 1, 0.0, 0.2).ok());
  EXPECT_EQ(watch.judged_step(), 1);
}

// Both ranks of node 1 arrive 60 ms late, taking turns at being the very last: no rank is last in
// most steps, the node is.
TEST(StragglerWatchTest, AWholeSlowNodeIsNamedWhenNoOneRankOfItIs) {
  StragglerWatch watch;
  watch.Reset(6, {0, 0, 1, 1, 2, 2});
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.002);
  for (int64_t s = 1; s <= 40; ++s) {
    std::vector<double> arrive(6);
    for (int r = 0; r < 6; ++r) arrive[r] = 0.2 + (r == 2 || r == 3 ? 0.06 : 0) + std::abs(noise(rng));
    const double all_in = *std::max_element(arrive.begin(), arrive.end());
    for (int r = 0; r < 6; ++r) ASSERT_TRUE(watch.Observe(r, s, all_in - arrive[r], 0.27).ok());
  }
  EXPECT_FALSE(watch.Current().has_value()) << "rank " << watch.Current()->rank;
  ASSERT_TRUE(watch.CurrentNode().has_value());
  EXPECT_EQ(watch.CurrentNode()->rank, 1);
  EXPECT_GT(watch.CurrentNode()->cost_share, 0.15);
  ASSERT_TRUE(watch.Named().has_value());
  EXPECT_EQ(watch.Named()->culprit, Culprit::kNode);
  EXPECT_EQ(watch.Named()->node, 1);
  EXPECT_EQ(watch.Named()->rank, -1);
}

// One slowed rank makes its node last as often as itself: the node judge must not name the node
// for it (one rank makes the node's lead), whichever judge gets there first.
TEST(StragglerWatchTest, ANodeWhoseLeadOneRankMakesIsNotNamedAsANode) {
  StragglerWatch watch;
  watch.Reset(6, {0, 0, 1, 1, 2, 2});
  std::mt19937 rng(11);
  for (const Wait& w : Pushes(6, 1, 40, /*slow=*/2, rng)) {
    ASSERT_TRUE(watch.Observe(w.rank, w.step, w.wait_s, 0.27).ok());
    EXPECT_FALSE(watch.CurrentNode().has_value()) << "step " << w.step;
  }
  ASSERT_TRUE(watch.Named().has_value());
  EXPECT_EQ(watch.Named()->culprit, Culprit::kRank);
  EXPECT_EQ(watch.Named()->rank, 2);
  EXPECT_EQ(watch.Named()->node, 1);
}

// A slow link in a ring: the rank just downstream of it finishes each step's all-reduce late and
// so arrives last at the next, and the others wait by where they sit on the ring (the pattern the
// namespace cluster shows with one host's link at 50 Mbit/s; docs/BENCHMARKS.md).
TEST(StragglerWatchTest, ALastRankWhoseOthersWaitUnevenlyIsASlowLinkNotASlowRank) {
  const std::vector<double> ring_wait = {0.073, 0.104, 0.130, 0.100, 0.073, 0.043, 0.014, 0.042};
  StragglerWatch watch;
  watch.Reset(8, {0, 0, 1, 1, 2, 2, 3, 3});
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0.0, 0.003);
  for (int64_t s = 1; s <= 40; ++s) {
    for (int r = 0; r < 8; ++r) {
      ASSERT_TRUE(watch.Observe(r, s, std::max(0.0, ring_wait[r] + noise(rng)), 0.25).ok());
    }
  }
  ASSERT_TRUE(watch.Current().has_value());
  EXPECT_EQ(watch.Current()->rank, 6);
  ASSERT_TRUE(watch.Named().has_value());
  EXPECT_EQ(watch.Named()->culprit, Culprit::kLink);
  EXPECT_EQ(watch.Named()->rank, 6);
  EXPECT_EQ(watch.Named()->node, 3);
  EXPECT_EQ(watch.named_since(), 20);
}

// With two other ranks there is no telling uneven from even: the last rank is named.
TEST(StragglerWatchTest, TooFewOtherRanksToTellALinkNameTheRank) {
  StragglerWatch watch;
  watch.Reset(3);
  for (int64_t s = 1; s <= 20; ++s) {
    ASSERT_TRUE(watch.Observe(0, s, 0.13, 0.25).ok());
    ASSERT_TRUE(watch.Observe(1, s, 0.04, 0.25).ok());
    ASSERT_TRUE(watch.Observe(2, s, 0.01, 0.25).ok());
  }
  ASSERT_TRUE(watch.Named().has_value());
  EXPECT_EQ(watch.Named()->culprit, Culprit::kRank);
  EXPECT_EQ(watch.Named()->rank, 2);
}

// Both ranks of node 2 arrive late in 30% of the steps (a host throttled by a CPU quota is slow in
// bursts): the node is last by the margin in under a third of the steps, never the 12 of 20 the
// first node judge needs, but far more often than chance makes one node of four. The sustained
// node judge names it (57 of 200 steps here, costing 3%), and nobody else is named.
TEST(StragglerWatchTest, ANodeLateInBurstsIsNamedByTheSustainedJudge) {
  StragglerWatch watch;
  watch.Reset(8, {0, 0, 1, 1, 2, 2, 3, 3});
  std::mt19937 rng(21);
  std::normal_distribution<double> noise(0.0, 0.003);
  std::bernoulli_distribution burst(0.3);
  std::uniform_real_distribution<double> late(0.008, 0.020);
  int64_t named_at = -1;
  for (int64_t s = 1; s <= 300; ++s) {
    std::vector<double> arrive(8);
    const double delay = burst(rng) ? late(rng) : 0;
    for (int r = 0; r < 8; ++r) arrive[r] = 0.1 + (r == 4 || r == 5 ? delay : 0) + std::abs(noise(rng));
    const double all_in = *std::max_element(arrive.begin(), arrive.end());
    for (int r = 0; r < 8; ++r) ASSERT_TRUE(watch.Observe(r, s, all_in - arrive[r], all_in + 0.01).ok());
    const std::optional<Finding> named = watch.Named();
    if (!named) continue;
    ASSERT_EQ(named->culprit, Culprit::kNode) << "step " << s << ": rank " << named->rank;
    ASSERT_EQ(named->node, 2) << "step " << s;
    if (named_at < 0) named_at = s;
  }
  ASSERT_GT(named_at, 0) << "not named in 300 steps";
  EXPECT_EQ(watch.named_since(), named_at) << "named once, and kept";
  EXPECT_GT(watch.Named()->verdict.window, 20) << "by the sustained judge: the first one's window is 20 steps";
  EXPECT_LT(watch.Named()->verdict.last_in, watch.Named()->verdict.window / 2);
}

// Steps recorded on the namespace cluster (bench/stragglers.py: 4 hosts x 2 ranks of train_recsys,
// AMD EPYC, 2 cores): a line per step, `step step_ms wait_ms...` by global rank.
std::vector<std::vector<double>> RecordedSteps(const std::string& name) {
  std::ifstream in(std::string(DTRUN_STRAGGLER_TESTDATA) + "/" + name);
  EXPECT_TRUE(in) << "cannot read " << name;
  std::vector<std::vector<double>> steps;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<double> step;
    for (double v; fields >> v;) step.push_back(v);
    steps.push_back(step);
  }
  return steps;
}

// Feeds recorded steps to a watch of 4 nodes x 2 ranks; returns every finding, in order, with its step.
std::vector<std::pair<int64_t, Finding>> Replay(const std::vector<std::vector<double>>& steps) {
  StragglerWatch watch;
  watch.Reset(8, {0, 0, 1, 1, 2, 2, 3, 3});
  std::vector<std::pair<int64_t, Finding>> found;
  for (const std::vector<double>& s : steps) {
    EXPECT_EQ(s.size(), 10u);
    if (s.size() != 10) break;
    for (int r = 0; r < 8; ++r)
      EXPECT_TRUE(watch.Observe(r, static_cast<int64_t>(s[0]), s[2 + r] / 1000, s[1] / 1000).ok());
    if (watch.Named()) found.emplace_back(static_cast<int64_t>(s[0]), *watch.Named());
  }
  return found;
}

TEST(StragglerWatchTest, RecordedCleanStepsNameNobody) {
  const auto steps = RecordedSteps("clean_4x2.txt");
  ASSERT_GE(steps.size(), 1000u);
  const auto found = Replay(steps);
  EXPECT_TRUE(found.empty()) << "step " << found.front().first << ": rank " << found.front().second.rank << ", node "
                             << found.front().second.node;
}

// Host 1's processes in a CPU quota of 35% of a core, ~25% slower steps: its ranks were last by the
// margin in about half the steps that had a last rank, a majority of no window of 20. Named as
// the node, by the sustained judge, and nothing else named.
TEST(StragglerWatchTest, ARecordedThrottledHostIsNamedAsANode) {
  const auto steps = RecordedSteps("throttled_host1_4x2.txt");
  ASSERT_GE(steps.size(), 250u);
  const auto found = Replay(steps);
  ASSERT_FALSE(found.empty()) << "not named in " << steps.size() << " steps";
  for (const auto& [step, f] : found) {
    EXPECT_EQ(f.culprit, Culprit::kNode) << "step " << step << ": rank " << f.rank;
    EXPECT_EQ(f.node, 1) << "step " << step;
  }
  EXPECT_LE(found.front().first, 200);
  EXPECT_GT(found.back().second.verdict.window, 20) << "the first judges' window does not reach the bar";
}

TEST(StragglerWatchTest, NodesThatDoNotFitTheWorldAreIgnored) {
  StragglerWatch watch(JudgeOptions{.window = 1, .alpha = 1});
  watch.Reset(2, {0});  // one entry for two ranks
  ASSERT_TRUE(watch.Observe(0, 1, 0.05, 0.2).ok());
  ASSERT_TRUE(watch.Observe(1, 1, 0.0, 0.2).ok());
  EXPECT_TRUE(watch.Current().has_value());
  EXPECT_FALSE(watch.CurrentNode().has_value());
  watch.Reset(2, {0, -4});
  ASSERT_TRUE(watch.Observe(0, 1, 0.05, 0.2).ok());
  ASSERT_TRUE(watch.Observe(1, 1, 0.0, 0.2).ok());
  EXPECT_FALSE(watch.CurrentNode().has_value());
}

}  // namespace
}  // namespace dtrun::straggler
