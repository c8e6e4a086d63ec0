// The progress line StatusPublisher shows on a terminal, from a node's rows.
#include "agent/status_publisher.h"

#include "gtest/gtest.h"

namespace dtrun {
namespace {

status::NodeStatus Node(std::vector<std::pair<int64_t, std::string>> ranks) {
  status::NodeStatus node;
  node.round = 2;
  node.total_steps = 1000;
  for (auto& [step, state] : ranks) {
    status::RankStatus r;
    r.step = step;
    r.state = state;
    r.steps_per_s = 4.0;
    node.ranks.push_back(r);
  }
  return node;
}

TEST(StatusPublisherTest, TheProgressLineShowsTheSlowestRanksStepTheRateAndTheRound) {
  const std::string line = StatusPublisher::ProgressLine(Node({{120, "running"}, {121, "running"}}));
  EXPECT_EQ(line.rfind("[dtrun] step 120/1000 | ", 0), 0u) << line;
  EXPECT_NE(line.find(" steps/s"), std::string::npos) << line;
  EXPECT_NE(line.find(" | round 2"), std::string::npos) << line;
}

TEST(StatusPublisherTest, NoProgressLineBeforeTheFirstStepOrWhileTheWorkersStop) {
  EXPECT_EQ(StatusPublisher::ProgressLine(Node({{-1, "running"}, {-1, "running"}})), "");
  EXPECT_EQ(StatusPublisher::ProgressLine(Node({{120, "stopping"}, {121, "succeeded"}})), "");
  EXPECT_EQ(StatusPublisher::ProgressLine(Node({})), "");
}

}  // namespace
}  // namespace dtrun
