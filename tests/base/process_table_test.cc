#include "base/process_table.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/child_process.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

ChildProcess SpawnSleeper(const std::string& marker) {
  SpawnRequest req;
  req.executable = "/bin/sleep";
  req.argv = {"sleep", "300"};
  req.env = {"DTRUN_TEST_MARKER=" + marker, "PATH=/bin:/usr/bin"};
  req.capture_output = false;
  absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(req);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(*p);
}

TEST(ProcessTableTest, FindsProcessesByEnvironmentMarkerOnly) {
  ChildProcess mine = SpawnSleeper("yes");
  ChildProcess other = SpawnSleeper("no");
  std::vector<ProcessEntry> found = FindProcessesWithEnv("DTRUN_TEST_MARKER", std::string("yes"));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, mine.pid());
  EXPECT_EQ(found[0].ppid, ::getpid());
  EXPECT_EQ(found[0].pgid, mine.pid()) << "a child process leads its own group";
  EXPECT_NE(found[0].cmdline.find("sleep 300"), std::string::npos);
}

TEST(ProcessTableTest, TerminateEndsProcessesAndSkipsReusedPids) {
  ChildProcess victim = SpawnSleeper("t");
  std::vector<ProcessEntry> found = FindProcessesWithEnv("DTRUN_TEST_MARKER", std::string("t"));
  ASSERT_EQ(found.size(), 1u);
  ProcessEntry stale = found[0];
  stale.start_ticks += 1;  // looks like a different process now holds the PID
  EXPECT_EQ(TerminateProcesses({stale}, SIGTERM, std::chrono::milliseconds(100)), 0);
  EXPECT_EQ(TerminateProcesses(found, SIGTERM, std::chrono::seconds(5)), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(victim.pid(), &status, 0), victim.pid());
  victim.MarkExited(status);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace dtrun
