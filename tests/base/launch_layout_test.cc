#include "base/launch_layout.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace dtrun::launch_layout {
namespace {

TEST(LaunchLayoutTest, ALaunchIdNamesItsProcess) {
  const std::string id = NewLaunchId();
  EXPECT_EQ(PidOfLaunchId(id), ::getpid());
  EXPECT_NE(NewLaunchId(), id);
  for (const char* other : {"", "-", "12-", "-0123abcd", "12-0123abc", "12-0123ABCD", "x2-0123abcd", "0-0123abcd",
                            "99999999-0123abcd", "12-0123abcd.json"}) {
    EXPECT_EQ(PidOfLaunchId(other), -1) << other;
  }
}

TEST(LaunchLayoutTest, EveryPathOfALaunch) {
  EXPECT_EQ(RegistryEntry("/run/dtrun", "12-0123abcd"), "/run/dtrun/12-0123abcd.json");
  EXPECT_EQ(LaunchDir("/run/dtrun", "12-0123abcd"), "/run/dtrun/12-0123abcd");
  EXPECT_EQ(ProgressSocket("/l", 3), "/l/progress.3.sock");
  EXPECT_EQ(StatusSnapshot("/l"), "/l/status.json");
  EXPECT_EQ(TimerFile("/l"), "/l/watchdog_timer");
  EXPECT_EQ(RankDir("/logs/run", 2, 5), "/logs/run/attempt_2/5");
  EXPECT_EQ(ErrorFile(RankDir("/e", 0, 1)), "/e/attempt_0/1/error.json");
  EXPECT_EQ(StacksFile(RankDir("/e", 0, 1)), "/e/attempt_0/1/stacks.txt");
}

}  // namespace
}  // namespace dtrun::launch_layout
