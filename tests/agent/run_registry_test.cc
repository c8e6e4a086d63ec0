#include "agent/run_registry.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>


#include "base/launch_layout.h"
#include "base/process_table.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun {
namespace {

// Points DTRUN_RUNTIME_DIR at `dir` for the test's duration.
class ScopedRuntimeDir {
 public:
  explicit ScopedRuntimeDir(const std::string& dir) { ::setenv("DTRUN_RUNTIME_DIR", dir.c_str(), 1); }
  ~ScopedRuntimeDir() { ::unsetenv("DTRUN_RUNTIME_DIR"); }
};

TEST(RunRegistryTest, ANewRuntimeDirIsCreatedPrivate) {
  const std::string dir = testing::MakeTempDir() + "/rt";
  ScopedRuntimeDir scoped(dir);
  absl::StatusOr<std::string> got = RuntimeDir();
  ASSERT_TRUE(got.ok()) << got.status();
  struct stat st;
  ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(RunRegistryTest, ADirOthersCanWriteOrALinkIsRefusedNotRepaired) {
  const std::string base = testing::MakeTempDir();
  const std::string open_dir = base + "/open", link = base + "/link", private_dir = base + "/private";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);  // as another user would have planted it
  ASSERT_EQ(::mkdir(private_dir.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(private_dir.c_str(), link.c_str()), 0);
  for (const std::string& dir : {open_dir, link}) {
    ScopedRuntimeDir scoped(dir);
    absl::StatusOr<std::string> got = RuntimeDir();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << dir;
    EXPECT_NE(std::string(got.status().message()).find(dir), std::string::npos);
    EXPECT_NE(std::string(got.status().message()).find("DTRUN_RUNTIME_DIR"), std::string::npos);
  }
  struct stat st;
  ASSERT_EQ(::lstat(open_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);  // nothing was chmod-ed through a name we do not trust
}

TEST(RunRegistryTest, RecordsArePrivateAndHostileEntriesAreSkippedWithoutBlocking) {
  const std::string dir = testing::MakeTempDir() + "/rt";
  ScopedRuntimeDir scoped(dir);
  LaunchRecord r;
  r.launch_id = "me";
  r.pid = ::getpid();
  r.start_ticks = ProcessStartTicks(r.pid).value_or(0);
  r.endpoint = "gpu1:29400";
  absl::StatusOr<std::string> path = RegisterLaunch(r);
  ASSERT_TRUE(path.ok()) << path.status();
  struct stat st;
  ASSERT_EQ(::stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A FIFO named like a record (it would block a plain read), and ill-typed JSON.
  ASSERT_EQ(::mkfifo((dir + "/fifo.json").c_str(), 0600), 0);
  FILE* bad = std::fopen((dir + "/bad.json").c_str(), "w");
  std::fputs(R"({"pid": "1", "launch_id": 5})", bad);
  std::fclose(bad);
  std::vector<LaunchRecord> all = ListLaunches();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].launch_id, "me");
  EXPECT_EQ(all[0].endpoint, "gpu1:29400");
}

TEST(RunRegistryTest, LeftoversOfGoneLaunchesAreRemovedOthersKept) {
  const std::string dir = testing::MakeTempDir() + "/rt";
  ScopedRuntimeDir scoped(dir);
  ASSERT_TRUE(RuntimeDir().ok());
  // A pid that has exited: spawn and reap a short process.
  auto [rc, out] = testing::RunToEnd({"/bin/sh", "-c", "echo $$"});
  ASSERT_EQ(rc, 0);
  const std::string dead = std::to_string(std::stoi(out)) + "-0123abcd";
  const std::string live = std::to_string(::getpid()) + "-89abcdef";  // alive, no record: kept
  const std::string other = "notes";                                   // not a launch id: kept
  for (const std::string& d : {dead, live, other}) ASSERT_EQ(::mkdir((dir + "/" + d).c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir + "/" + dead + "/attempt_0").c_str(), 0700), 0);
  // A record of the gone launch (a SIGKILLed dtrun leaves it), one of this live process, and a
  // file named like a record that is not one (left alone).
  LaunchRecord gone;
  gone.launch_id = dead;
  gone.pid = std::stoi(out);
  gone.start_ticks = 1;
  ASSERT_TRUE(RegisterLaunch(gone).ok());
  LaunchRecord me;
  me.launch_id = live;
  me.pid = ::getpid();
  me.start_ticks = ProcessStartTicks(me.pid).value_or(0);
  ASSERT_TRUE(RegisterLaunch(me).ok());
  std::FILE* notes = std::fopen((dir + "/notes.json").c_str(), "w");
  std::fputs("[]", notes);
  std::fclose(notes);
  EXPECT_EQ(RemoveLeftoversOfGoneLaunches(), 2);  // the directory and the record
  struct stat st;
  EXPECT_NE(::stat((dir + "/" + dead).c_str(), &st), 0);
  EXPECT_NE(::stat(launch_layout::RegistryEntry(dir, dead).c_str(), &st), 0);
  EXPECT_EQ(::stat(launch_layout::RegistryEntry(dir, live).c_str(), &st), 0);
  EXPECT_EQ(::stat((dir + "/notes.json").c_str(), &st), 0);
  EXPECT_EQ(::stat((dir + "/" + live).c_str(), &st), 0);
  EXPECT_EQ(::stat((dir + "/" + other).c_str(), &st), 0);
}

// A restarted agent asks whether the agent of its node is still alive here: only a live launch
// other than itself, of the same run, rendezvous and node rank, counts.
TEST(RunRegistryTest, AnotherLaunchRunsNodeFindsOnlyALiveAgentOfThatNode) {
  const std::string dir = testing::MakeTempDir() + "/rt";
  ScopedRuntimeDir scoped(dir);
  auto record = [](const std::string& id, pid_t pid, unsigned long long ticks) {
    LaunchRecord r;
    r.launch_id = id;
    r.run_id = "job";
    r.pid = pid;
    r.start_ticks = ticks;
    r.node_rank = 1;
    r.service = "master:29500";
    return r;
  };
  const pid_t parent = ::getppid();  // alive for the test's length, and not this process
  ASSERT_TRUE(RegisterLaunch(record("mine", ::getpid(), ProcessStartTicks(::getpid()).value_or(0))).ok());
  EXPECT_FALSE(AnotherLaunchRunsNode("job", "master:29500", 1));  // this process itself
  auto [rc, out] = testing::RunToEnd({"/bin/sh", "-c", "echo $$"});
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(RegisterLaunch(record(out.substr(0, out.size() - 1) + "-dead", std::stoi(out), 1)).ok());
  EXPECT_FALSE(AnotherLaunchRunsNode("job", "master:29500", 1));  // a SIGKILLed one's leftover
  ASSERT_TRUE(RegisterLaunch(record("alive", parent, ProcessStartTicks(parent).value_or(0))).ok());
  EXPECT_TRUE(AnotherLaunchRunsNode("job", "master:29500", 1));
  EXPECT_FALSE(AnotherLaunchRunsNode("job", "master:29500", 0));
  EXPECT_FALSE(AnotherLaunchRunsNode("job", "master:29501", 1));
  EXPECT_FALSE(AnotherLaunchRunsNode("other", "master:29500", 1));
  // An elastic node (no static rank) is any live agent of the run at that rendezvous.
  LaunchRecord elastic = record("elastic", parent, ProcessStartTicks(parent).value_or(0));
  elastic.node_rank = -1;
  elastic.service = "master:29400";
  ASSERT_TRUE(RegisterLaunch(elastic).ok());
  EXPECT_TRUE(AnotherLaunchRunsNode("job", "master:29400", -1));
  EXPECT_FALSE(AnotherLaunchRunsNode("job", "", -1));  // a launch that joins no rendezvous
  // Records are read as untrusted: a rank of another type or out of range names no rank.
  for (const std::string& rank : {std::string("\"2\""), std::string("4294967298"), std::string("2.0")}) {
    SCOPED_TRACE(rank);
    const std::string json = "{\"launch_id\": \"odd\", \"run_id\": \"job\", \"pid\": " + std::to_string(parent) +
                             ", \"start_ticks\": " + std::to_string(ProcessStartTicks(parent).value_or(0)) +
                             ", \"node_rank\": " + rank + ", \"service\": \"master:29500\"}";
    std::FILE* f = std::fopen(launch_layout::RegistryEntry(dir, "odd").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(json.c_str(), f);
    std::fclose(f);
    EXPECT_FALSE(AnotherLaunchRunsNode("job", "master:29500", 2));
  }
}

}  // namespace
}  // namespace dtrun
