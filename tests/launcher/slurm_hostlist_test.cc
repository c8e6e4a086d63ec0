// Slurm's hostlist grammar. Expected expansions are what `scontrol show hostnames` (Slurm 22.05,
// Debian bookworm) prints for the same lists; SlurmHostlistScontrolTest compares them live.
#include "launcher/slurm_hostlist.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Expand(const std::string& list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.value_or(std::vector<std::string>{});
}

TEST(SlurmHostlistTest, RangesListsAndZeroPadding) {
  EXPECT_THAT(Expand("gpu[01-04,07]"), ElementsAre("gpu01", "gpu02", "gpu03", "gpu04", "gpu07"));
  EXPECT_THAT(Expand("x[8-10]"), ElementsAre("x8", "x9", "x10"));
  EXPECT_THAT(Expand("y[08-10]"), ElementsAre("y08", "y09", "y10"));
  EXPECT_THAT(Expand("x[098-101]"), ElementsAre("x098", "x099", "x100", "x101"));
  EXPECT_THAT(Expand("q[1,1]"), ElementsAre("q1", "q1"));  // duplicates kept, as Slurm does
  EXPECT_THAT(Expand("plain"), ElementsAre("plain"));
}

TEST(SlurmHostlistTest, SeveralBracketsGiveEveryCombinationLeftmostSlowest) {
  EXPECT_THAT(Expand("a[1-2]-b[3-4]"), ElementsAre("a1-b3", "a1-b4", "a2-b3", "a2-b4"));
  EXPECT_THAT(Expand("x[1-3,5]y[1-2]"), ElementsAre("x1y1", "x1y2", "x2y1", "x2y2", "x3y1", "x3y2", "x5y1", "x5y2"));
  EXPECT_THAT(Expand("n[1-2]x[3]"), ElementsAre("n1x3", "n2x3"));
}

TEST(SlurmHostlistTest, SeveralGroupsSeparatedByCommasOutsideBrackets) {
  EXPECT_THAT(Expand("gpu[01-02],cpu[1-2],login"), ElementsAre("gpu01", "gpu02", "cpu1", "cpu2", "login"));
  EXPECT_THAT(Expand(" a , b "), ElementsAre("a", "b"));
  EXPECT_THAT(Expand("a[1-2],,b"), ElementsAre("a1", "a2", "b"));
  EXPECT_TRUE(Expand("").empty());
}

TEST(SlurmHostlistTest, MalformedListsAreNamedNotGuessed) {
  for (const char* bad : {"a[1-2", "a]", "a[2-1]", "a[x]", "a[[1]]", "a[1-]", "a[-3]", "a[]", "a[1;2]",
                          "a[99999999999999999999]"}) {
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(bad);
    EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(hosts.status().message().find(bad), std::string::npos) << hosts.status();
  }
}

TEST(SlurmHostlistTest, TheNumberOfHostsIsBounded) {
  EXPECT_EQ(ExpandHostlist("a[0-65535]")->size(), 65536u);
  EXPECT_THAT(ExpandHostlist("a[0-65536]"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("hostlist")));
  EXPECT_THAT(ExpandHostlist("a[0-300]b[0-300]"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         ::testing::HasSubstr("hostlist")));  // 90,601 combinations
  EXPECT_THAT(ExpandHostlist("a[0-9]b[0-9]", 99),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("hostlist")));
  EXPECT_EQ(ExpandHostlist("a[0-9]b[0-9]", 100)->size(), 100u);
}

}  // namespace
}  // namespace dtrun
