// The worker's reading of its launcher's environment: torchrun's variables taken as they are,
// anything else refused with the variable named, never read as rank 0.
#include "worker/dist_env.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

class DistEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  static void Clear() {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"}) {
      ::unsetenv(name);
    }
  }
};

TEST_F(DistEnvTest, WithoutALauncherItIsOneProcess) {
  absl::StatusOr<DistEnv> e = ReadDistEnv();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->world_size, 1);
  EXPECT_FALSE(e->distributed());
  EXPECT_EQ(e->master_addr, "127.0.0.1");
}

TEST_F(DistEnvTest, ReadsWhatALauncherSets) {
  Set("RANK", "5");
  Set("WORLD_SIZE", "8");
  Set("LOCAL_RANK", "1");
  Set("LOCAL_WORLD_SIZE", "4");
  Set("MASTER_ADDR", "10.0.0.1");
  Set("MASTER_PORT", "29500");
  Set("TORCHELASTIC_USE_AGENT_STORE", "True");
  Set("TORCHELASTIC_RESTART_COUNT", "3");
  absl::StatusOr<DistEnv> e = ReadDistEnv();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 4);
  EXPECT_EQ(e->master_addr, "10.0.0.1");
  EXPECT_EQ(e->master_port, 29500);
  EXPECT_TRUE(e->use_agent_store);
  EXPECT_EQ(e->restart_count, 3);
}

TEST_F(DistEnvTest, AValueThatIsNoWholeNumberIsRefusedWithItsName) {
  for (const char* bad : {"abc", "2x", "1.5", "-1", "99999999999999999999", "0x3"}) {
    Set("RANK", bad);
    Set("WORLD_SIZE", "4");
    absl::StatusOr<DistEnv> e = ReadDistEnv();
    ASSERT_FALSE(e.ok()) << "RANK=" << bad;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(std::string("RANK=") + bad + " in the environment"), std::string::npos)
        << e.status();
    EXPECT_NE(e.status().message().find("under dtrun"), std::string::npos) << e.status();
  }
  ::unsetenv("RANK");
  Set("MASTER_PORT", "70000");
  EXPECT_FALSE(ReadDistEnv().ok());
  Set("MASTER_PORT", "29500");
  Set("WORLD_SIZE", "0");
  EXPECT_FALSE(ReadDistEnv().ok());
}

TEST_F(DistEnvTest, AHostileValueIsShownCutShort) {
  Set("WORLD_SIZE", std::string(5000, 'x'));
  absl::StatusOr<DistEnv> e = ReadDistEnv();
  ASSERT_FALSE(e.ok());
  EXPECT_LT(e.status().message().size(), 200u) << e.status();
}

TEST_F(DistEnvTest, ARankOutsideItsSizeIsRefused) {
  Set("RANK", "3");
  Set("WORLD_SIZE", "2");
  absl::StatusOr<DistEnv> e = ReadDistEnv();
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("RANK=3 but WORLD_SIZE=2"), std::string::npos) << e.status();

  ::unsetenv("WORLD_SIZE");
  e = ReadDistEnv();
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("RANK=3 but WORLD_SIZE is not set"), std::string::npos) << e.status();

  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "2");
  Set("LOCAL_WORLD_SIZE", "2");
  e = ReadDistEnv();
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("LOCAL_RANK=2 but LOCAL_WORLD_SIZE=2"), std::string::npos) << e.status();
}

// torch.distributed.launch before 1.9 set LOCAL_RANK but not LOCAL_WORLD_SIZE.
TEST_F(DistEnvTest, ALocalRankWithoutALocalSizeIsTaken) {
  Set("RANK", "3");
  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "3");
  absl::StatusOr<DistEnv> e = ReadDistEnv();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->local_rank, 3);
}

}  // namespace
}  // namespace dtrun::worker
