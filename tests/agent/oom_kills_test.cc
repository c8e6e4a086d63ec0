#include "agent/oom_kills.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_root.h"

namespace dtrun {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

TEST(ProcCgroupTest, ReadsTheUnifiedPathAndTheMemoryControllersPath) {
  ProcCgroups v2 = ParseProcCgroup("0::/user.slice/job.scope\n");
  EXPECT_EQ(v2.v2, "/user.slice/job.scope");
  EXPECT_EQ(v2.v1_memory, "");

  // A hybrid machine: v1 controllers, the memory one sharing its hierarchy, and an empty v2.
  ProcCgroups hybrid =
      ParseProcCgroup("9:name=systemd:/\n5:devices:/\n4:cpuacct,memory:/slurm/uid_0/job_7/step_0\n0::/\n");
  EXPECT_EQ(hybrid.v1_memory, "/slurm/uid_0/job_7/step_0");
  EXPECT_EQ(hybrid.v2, "/");

  EXPECT_EQ(ParseProcCgroup("4:memory:/a:b\n").v1_memory, "/a:b");  // a path may hold colons
  ProcCgroups junk = ParseProcCgroup("garbage\n4:memory\n4:memory:relative\n::\n\n");
  EXPECT_EQ(junk.v1_memory, "");
  EXPECT_EQ(junk.v2, "");
}

TEST(FindCounterTest, ReadsOnlyTheWholeKeyWithAWellFormedValue) {
  EXPECT_THAT(FindCounter("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n", "oom_kill"), Optional(2));
  EXPECT_THAT(FindCounter("oom_kill_disable 1\nunder_oom 0\noom_kill 5", "oom_kill"), Optional(5));
  EXPECT_EQ(FindCounter("oom_kill_disable 1\n", "oom_kill"), std::nullopt);
  EXPECT_EQ(FindCounter("oom_kill -1\n", "oom_kill"), std::nullopt);
  EXPECT_EQ(FindCounter("oom_kill 99999999999999999999\n", "oom_kill"), std::nullopt);
  EXPECT_EQ(FindCounter("oom_kill 3 4\n", "oom_kill"), std::nullopt);
  EXPECT_EQ(FindCounter("", "oom_kill"), std::nullopt);
}

using ::dtrun::testing::FakeRoot;  // stands for / : proc/self/cgroup, proc/vmstat and sys/fs/cgroup/...

TEST(OomKillCounterTest, NamesTheKillerWhenTheCgroupsCountRoseWithItsLimit) {
  FakeRoot fake;
  fake.Write("/proc/self/cgroup", "0::/job/\n");
  fake.Write("/sys/fs/cgroup/job/memory.events", "low 0\nhigh 0\nmax 40\noom 2\noom_kill 2\n");
  fake.Write("/sys/fs/cgroup/job/memory.max", "268435456\n");
  fake.Write("/proc/vmstat", "pgfault 100\noom_kill 7\n");
  OomKillCounter counter(fake.root());
  EXPECT_EQ(counter.cgroup_file(), fake.root() + "/sys/fs/cgroup/job/memory.events");
  const OomCounts before = counter.Read();
  EXPECT_EQ(before.cgroup, 2);
  EXPECT_EQ(before.machine, 7);
  EXPECT_EQ(counter.ExplainKill(before, counter.Read()), std::nullopt);  // a SIGKILL from someone else

  fake.Write("/sys/fs/cgroup/job/memory.events", "low 0\nhigh 0\nmax 41\noom 3\noom_kill 3\n");
  fake.Write("/proc/vmstat", "pgfault 100\noom_kill 8\n");
  std::optional<std::string> why = counter.ExplainKill(before, counter.Read());
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why,
              AllOf(HasSubstr("out-of-memory killer"), HasSubstr("oom_kill 2 -> 3"), HasSubstr(counter.cgroup_file()),
                    HasSubstr("its memory limit is 256.0 MiB"), HasSubstr("batch size")));
  EXPECT_THAT(counter.NoteKillsBeside(before, counter.Read()), Optional(HasSubstr("killed 1 process of this job")));
}

TEST(OomKillCounterTest, AKillElsewhereOnTheMachineIsNotThisWorkersWhenItsCgroupCounts) {
  FakeRoot fake;
  fake.Write("/proc/self/cgroup", "0::/job\n");
  fake.Write("/sys/fs/cgroup/job/memory.events", "oom_kill 0\n");
  fake.Write("/proc/vmstat", "oom_kill 1\n");
  OomKillCounter counter(fake.root());
  const OomCounts before = counter.Read();
  fake.Write("/proc/vmstat", "oom_kill 2\n");
  EXPECT_EQ(counter.ExplainKill(before, counter.Read()), std::nullopt);
  EXPECT_EQ(counter.NoteKillsBeside(before, counter.Read()), std::nullopt);
}

TEST(OomKillCounterTest, FallsBackToTheV1MemoryControllerWhenTheUnifiedTreeHasNoCounter) {
  FakeRoot fake;
  fake.Write("/proc/self/cgroup", "4:memory:/slurm/job_1\n0::/\n");
  fake.Write("/sys/fs/cgroup/cgroup.procs", "");  // a v2 root without the memory controller
  fake.Write("/sys/fs/cgroup/memory/slurm/job_1/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  fake.Write("/sys/fs/cgroup/memory/slurm/job_1/memory.limit_in_bytes", "9223372036854771712\n");
  OomKillCounter counter(fake.root());
  EXPECT_EQ(counter.cgroup_file(), fake.root() + "/sys/fs/cgroup/memory/slurm/job_1/memory.oom_control");
  const OomCounts before = counter.Read();
  fake.Write("/sys/fs/cgroup/memory/slurm/job_1/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  std::optional<std::string> why = counter.ExplainKill(before, counter.Read());
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, AllOf(HasSubstr("oom_kill 0 -> 2"), Not(HasSubstr("limit"))));  // no limit set: none said
  EXPECT_THAT(counter.NoteKillsBeside(before, counter.Read()), Optional(HasSubstr("killed 2 processes")));
}

TEST(OomKillCounterTest, TheLimitThatBindsIsTheSmallestOnTheWayToTheRoot) {
  FakeRoot fake;  // a Slurm task's cgroup: no limit of its own; its step's and its job's have one
  fake.Write("/proc/self/cgroup", "0::/slurm/job_7/step_0/task_0\n");
  fake.Write("/sys/fs/cgroup/slurm/job_7/step_0/task_0/memory.events", "oom_kill 0\n");
  fake.Write("/sys/fs/cgroup/slurm/job_7/step_0/task_0/memory.max", "max\n");
  fake.Write("/sys/fs/cgroup/slurm/job_7/step_0/memory.max", "8589934592\n");
  fake.Write("/sys/fs/cgroup/slurm/job_7/memory.max", "4294967296\n");
  fake.Write("/sys/fs/cgroup/slurm/memory.max", "garbage\n");
  OomKillCounter counter(fake.root());
  const OomCounts before = counter.Read();
  fake.Write("/sys/fs/cgroup/slurm/job_7/step_0/task_0/memory.events", "oom_kill 1\n");
  EXPECT_THAT(counter.ExplainKill(before, counter.Read()),
              Optional(HasSubstr("; its memory limit is 4.0 GiB, set on /slurm/job_7): ")));
}

TEST(OomKillCounterTest, UsesTheMachinesCountOnlyWhereNoCgroupCountIsReadable) {
  FakeRoot fake;
  fake.Write("/proc/self/cgroup", "0::/\n");
  fake.Write("/proc/vmstat", "oom_kill 4\n");
  OomKillCounter counter(fake.root());
  EXPECT_EQ(counter.cgroup_file(), "");
  const OomCounts before = counter.Read();
  EXPECT_EQ(before.cgroup, -1);
  fake.Write("/proc/vmstat", "oom_kill 5\n");
  EXPECT_THAT(counter.ExplainKill(before, counter.Read()),
              Optional(AllOf(HasSubstr("it seems"), HasSubstr("machine-wide"))));
  EXPECT_EQ(counter.NoteKillsBeside(before, counter.Read()), std::nullopt);  // too weak to blame another failure on
}

TEST(OomKillCounterTest, SaysNothingWhereNothingIsReadable) {
  FakeRoot fake;
  OomKillCounter counter(fake.root());
  const OomCounts counts = counter.Read();
  EXPECT_EQ(counts.cgroup, -1);
  EXPECT_EQ(counts.machine, -1);
  EXPECT_EQ(counter.ExplainKill(counts, counter.Read()), std::nullopt);
  OomCounts risen = counts;
  risen.machine = 3;  // a count that appears later is no rise
  EXPECT_EQ(counter.ExplainKill(counts, risen), std::nullopt);
}

}  // namespace
}  // namespace dtrun
