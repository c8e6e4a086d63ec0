#include "launcher/cpu_topology.h"

#include <sched.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_root.h"

namespace dtrun {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuListTest, ReadsAndWritesTheKernelsFormat) {
  EXPECT_THAT(*ParseCpuList("0-3,8-11\n"), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
  EXPECT_THAT(*ParseCpuList("5"), ElementsAre(5));
  EXPECT_THAT(*ParseCpuList("3,1,1-2"), ElementsAre(1, 2, 3));
  EXPECT_TRUE(ParseCpuList("")->empty());
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
}

TEST(CpuListTest, AMalformedListIsAnErrorNamingThePart) {
  for (const char* bad : {"3-", "-1", "4-2", "a", "0-99999", "1,,x", "1-2-3"}) {
    EXPECT_FALSE(ParseCpuList(bad).ok()) << bad;
  }
  EXPECT_THAT(ParseCpuList("0,4-2").status().message(), HasSubstr("'4-2' is not a CPU or a range of CPUs"));
}

using ::dtrun::testing::FakeRoot;

TEST(CpuTopologyTest, ReadsNodesSocketsCoresAndL3FromSysfs) {
  FakeRoot sys;
  sys.Write("/sys/devices/system/node/node0/cpulist", "0-1,4-5");
  sys.Write("/sys/devices/system/node/node1/cpulist", "2-3,6-7");
  for (int id = 0; id < 8; ++id) {
    const std::string cpu = "/sys/devices/system/cpu/cpu" + std::to_string(id);
    const int core = id % 4;
    sys.Write(cpu + "/topology/physical_package_id", std::to_string(core / 2));
    sys.Write(cpu + "/topology/thread_siblings_list", std::to_string(core) + "," + std::to_string(core + 4));
    sys.Write(cpu + "/cache/index0/level", "1");
    sys.Write(cpu + "/cache/index3/level", "3");
    sys.Write(cpu + "/cache/index3/shared_cpu_list", core < 2 ? "0-1,4-5" : "2-3,6-7");
  }
  const CpuTopology t = ReadCpuTopology(sys.root(), {6, 1, 2});  // as sched_getaffinity may give them
  ASSERT_EQ(t.cpus.size(), 3u);
  EXPECT_EQ(t.cpus[0].id, 1);
  EXPECT_EQ(t.cpus[0].node, 0);
  EXPECT_EQ(t.cpus[0].core, 1);
  EXPECT_EQ(t.cpus[0].l3, 0);
  EXPECT_EQ(t.cpus[2].id, 6);
  EXPECT_EQ(t.cpus[2].node, 1);
  EXPECT_EQ(t.cpus[2].package, 1);
  EXPECT_EQ(t.cpus[2].core, 2);
  EXPECT_EQ(t.cpus[2].l3, 2);
}

TEST(CpuTopologyTest, AKernelThatDescribesNothingGivesOneNodeOfSeparateCores) {
  FakeRoot sys;
  sys.Write("/sys/devices/system/node/node0/cpulist", "garbage");
  const CpuTopology t = ReadCpuTopology(sys.root(), {0, 1});
  ASSERT_EQ(t.cpus.size(), 2u);
  EXPECT_EQ(t.cpus[1].node, 0);
  EXPECT_EQ(t.cpus[1].core, 1);
  EXPECT_EQ(t.cpus[1].l3, -1);
}

TEST(CpuTopologyTest, TheAllowedCpusAreTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  const std::vector<int> allowed = AllowedCpus();
  EXPECT_EQ(static_cast<int>(allowed.size()), CPU_COUNT(&set));
  for (int cpu : allowed) EXPECT_TRUE(CPU_ISSET(cpu, &set)) << cpu;
}

}  // namespace
}  // namespace dtrun
