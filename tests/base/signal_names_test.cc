#include "base/signal_names.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun {

TEST(SignalNamesTest, AcceptsTorchrunSpellings) {
  EXPECT_EQ(*ParseSignal("SIGTERM"), SIGTERM);
  EXPECT_EQ(*ParseSignal("term"), SIGTERM);
  EXPECT_EQ(*ParseSignal("9"), SIGKILL);
  EXPECT_EQ(ParseSignal("SIGNOPE").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SignalNamesTest, ParsesTheDefaultList) {
  std::vector<int> expected = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  EXPECT_EQ(*ParseSignalList("SIGTERM,SIGINT,SIGHUP,SIGQUIT"), expected);
  EXPECT_THAT(ParseSignalList("SIGTERM,bogus"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("unknown")));
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
}

}  // namespace dtrun
