// The warm pool (agent/warm_pool.h) with a real parkable program (warm_probe): parked workers are
// released with the round's environment, as many as the depth, oldest first; one started for
// another command is not released but ended.
#include "agent/warm_pool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/child_output.h"
#include "tests/support/process_harness.h"

namespace dtrun {
namespace {

SpawnRequest Probe() {
  SpawnRequest req;
  req.executable = testing::BinDir() + "/warm_probe";
  req.argv = {"warm_probe"};
  req.env = {"PATH=/bin:/usr/bin", "RANK=0", "TORCHELASTIC_RESTART_COUNT=0"};
  return req;
}

using ::dtrun::testing::OutputToExit;  // what a released probe printed (it exits at once on a restart count other than
                                       // 0)

TEST(WarmPoolTest, ReleasesAsManyAsTheDepthWithTheRoundsEnvironment) {
  WarmPool pool;
  pool.Fill({Probe()}, /*depth=*/2);
  EXPECT_EQ(pool.size(), 2u);
  pool.Fill({Probe()}, /*depth=*/2);  // already full
  EXPECT_EQ(pool.size(), 2u);
  SpawnRequest round = Probe();
  round.env = {"PATH=/bin:/usr/bin", "RANK=6", "TORCHELASTIC_RESTART_COUNT=2"};
  std::set<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    std::optional<ChildProcess> p = pool.Release(0, round);
    ASSERT_TRUE(p.has_value());
    pids.insert(p->pid());
    const std::string out = OutputToExit(*p);
    EXPECT_NE(out.find("probe rank=6 restart=2 pid=" + std::to_string(p->pid()) + " park_fd=unset"),
              std::string::npos)
        << out;
  }
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_FALSE(pool.Release(0, round).has_value());
}

TEST(WarmPoolTest, AWorkerParkedForAnotherCommandIsEndedNotReleased) {
  WarmPool pool;
  pool.Fill({Probe()});
  SpawnRequest other = Probe();
  other.argv.push_back("--another-flag");
  EXPECT_FALSE(pool.Release(0, other).has_value());
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_FALSE(pool.off());  // a changed command is not a failure of warm starts
}

}  // namespace
}  // namespace dtrun
