// The worker's end of warm starts (worker/warm_start.h): a process started parked takes the
// round's whole environment from the park pipe; a pipe that closes or carries something malformed
// is an error, never a partial environment.
#include "worker/warm_start.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/park_message.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

extern char** environ;

namespace dtrun::worker {
namespace {

// Keeps the test process's environment across a test that replaces it.
class WarmStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (char** e = environ; *e != nullptr; ++e) saved_.emplace_back(*e);
  }
  void TearDown() override {
    ::clearenv();
    for (const std::string& entry : saved_) {
      const size_t eq = entry.find('=');
      ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
    }
  }
  // A park pipe holding `message` (its write end closed), named by DTRUN_PARK_FD.
  void Park(const std::string& message) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ASSERT_EQ(::write(fds[1], message.data(), message.size()), static_cast<ssize_t>(message.size()));
    ::close(fds[1]);
    ::setenv("DTRUN_PARK_FD", std::to_string(fds[0]).c_str(), 1);
  }
  std::vector<std::string> saved_;
};

TEST_F(WarmStartTest, NotParkedReturnsAtOnceAndStillSaysTheProgramParks) {
  ::unsetenv("DTRUN_PARK_FD");
  ::setenv("RANK", "5", 1);
  EXPECT_TRUE(AwaitRound().ok());
  EXPECT_TRUE(ParksBeforeRounds());
  EXPECT_STREQ(std::getenv("RANK"), "5");
}

TEST_F(WarmStartTest, TheReleaseReplacesTheWholeEnvironment) {
  ::setenv("STALE", "from the parked start", 1);
  Park(EncodeRelease({"RANK=3", "WORLD_SIZE=8", "EMPTY="}));
  ASSERT_TRUE(AwaitRound().ok());
  EXPECT_STREQ(std::getenv("RANK"), "3");
  EXPECT_STREQ(std::getenv("WORLD_SIZE"), "8");
  EXPECT_STREQ(std::getenv("EMPTY"), "");
  EXPECT_EQ(std::getenv("STALE"), nullptr);
  EXPECT_EQ(std::getenv("DTRUN_PARK_FD"), nullptr);
}

TEST_F(WarmStartTest, AClosedOrMalformedPipeIsAnErrorAndChangesNothing) {
  ::setenv("KEPT", "1", 1);
  Park("");  // the agent went away before releasing it
  EXPECT_THAT(AwaitRound(), ::dtrun::testing::StatusIs(absl::StatusCode::kUnavailable,
                                                       ::testing::HasSubstr("before releasing this worker")));
  EXPECT_STREQ(std::getenv("KEPT"), "1");
  Park("12\nRANK=3");  // shorter than it says
  EXPECT_THAT(AwaitRound(),
              ::dtrun::testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::HasSubstr("release")));
  Park("7\nnoequal");
  EXPECT_THAT(AwaitRound(),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("release")));
  EXPECT_STREQ(std::getenv("KEPT"), "1");
  ::setenv("DTRUN_PARK_FD", "not-a-number", 1);
  EXPECT_THAT(AwaitRound(),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("DTRUN_PARK_FD")));
}

}  // namespace
}  // namespace dtrun::worker
