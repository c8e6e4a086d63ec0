// ExpandHostlist against Slurm's own `scontrol show hostnames` (Debian's slurm-client), on fixed
// lists and on generated ones: the same hosts in the same order. Skipped without scontrol.
#include <unistd.h>

#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "launcher/slurm_hostlist.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

// A hostlist as Slurm writes them: groups of a name and bracketed ranges, the last part a bracket.
std::string RandomHostlist(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::string> groups;
  for (int g = pick(1, 3); g > 0; --g) {
    std::string expr;
    for (int b = pick(1, 2); b > 0; --b) {
      for (int i = pick(1, 3); i > 0; --i) expr += static_cast<char>('a' + pick(0, 25));
      if (b == 2 && pick(0, 1)) expr += "-";
      std::vector<std::string> ranges;
      for (int r = pick(1, 3); r > 0; --r) {
        const int width = pick(1, 3), lo = pick(0, 120), hi = lo + pick(0, 12);
        std::string a = std::to_string(lo);
        if (static_cast<int>(a.size()) < width) a.insert(0, width - a.size(), '0');
        ranges.push_back(pick(0, 2) ? absl::StrCat(a, "-", hi) : a);
      }
      absl::StrAppend(&expr, "[", absl::StrJoin(ranges, ","), "]");
    }
    groups.push_back(expr);
  }
  return absl::StrJoin(groups, ",");
}

TEST(SlurmHostlistScontrolTest, ExpandsEveryListAsScontrolDoes) {
  if (::access("/usr/bin/scontrol", X_OK) != 0) GTEST_SKIP() << "no scontrol (apt install slurm-client)";
  const std::string dir = MakeTempDir();
  std::ofstream(dir + "/slurm.conf") << "ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\n"
                                        "PartitionName=p Nodes=localhost\n";
  std::vector<std::string> lists = {"gpu[01-04,07]", "a[1-2]-b[3-4]", "x[8-10],y[08-10],plain", "x[098-101]",
                                    "q[1,1]", "x[1-3,5-6]y[1-2]", "n[1-2]x[3]", " a , b "};
  std::mt19937 rng(20261122);
  for (int i = 0; i < 40; ++i) lists.push_back(RandomHostlist(rng));
  for (const std::string& list : lists) {
    auto [rc, out] = RunToEnd({"/usr/bin/scontrol", "show", "hostnames", list}, {{"SLURM_CONF", dir + "/slurm.conf"}});
    ASSERT_EQ(rc, 0) << list << ": " << out;
    std::vector<std::string> theirs = absl::StrSplit(out, '\n', absl::SkipEmpty());
    absl::StatusOr<std::vector<std::string>> ours = ExpandHostlist(list);
    ASSERT_TRUE(ours.ok()) << list << ": " << ours.status();
    EXPECT_EQ(*ours, theirs) << list;
  }
}

}  // namespace
}  // namespace dtrun::testing
