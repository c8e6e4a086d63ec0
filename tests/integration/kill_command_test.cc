// `dtrun kill` finds exactly dtrun's processes — also orphans whose launcher was kill -9ed — and
// leaves unrelated processes alone.
#include <dirent.h>
#include <signal.h>

#include <fstream>
#include <regex>

#include "base/process_table.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {


// The launch guard is dtrun's child with the same command line and no worker marker.
std::vector<pid_t> GuardsOf(pid_t dtrun) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    auto p = ReadProcess(pid, {"DTRUN_LAUNCH_ID"});
    if (p.ok() && p->ppid == dtrun && p->env.empty() && p->cmdline.find("dtrun") != std::string::npos) {
      out.push_back(pid);
    }
  }
  ::closedir(d);
  return out;
}

TEST(KillCommandTest, EndsOrphansOfAKilledLauncherAndSparesOtherProcesses) {
  std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}};
  Harness job({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0", "--rdzv-id", "orphans",
               Worker("with_grandchild.sh")}, env);
  ASSERT_TRUE(job.WaitForOutput("READY 0"));
  ASSERT_TRUE(job.WaitForOutput("READY 1"));
  std::regex re("GRANDCHILD (\\d+)");
  std::vector<pid_t> orphans;
  std::string out = job.out();
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) orphans.push_back(std::stoi((*it)[1]));
  ASSERT_EQ(orphans.size(), 2u);
  // Simulate the worst case: the guard and the launcher are both SIGKILLed.
  for (pid_t g : GuardsOf(job.pid())) ::kill(g, SIGKILL);
  ::kill(job.pid(), SIGKILL);
  job.Wait();
  Harness bystander({"/bin/sleep", "300"});  // an unrelated process of the same user

  auto [dry_rc, table] = RunToEnd({DtrunBinary(), "kill", "--run-id", "orphans", "--dry-run"}, env);
  EXPECT_EQ(dry_rc, 0) << table;
  for (pid_t p : orphans) EXPECT_NE(table.find(std::to_string(p)), std::string::npos) << table;
  EXPECT_NE(table.find("RUN_ID"), std::string::npos);

  // --all would also end other tests' jobs running in parallel: list with it, kill by run id.
  auto [all_rc, all_table] = RunToEnd({DtrunBinary(), "kill", "--all", "--dry-run"}, env);
  EXPECT_EQ(all_rc, 0) << all_table;
  for (pid_t p : orphans) EXPECT_NE(all_table.find(std::to_string(p)), std::string::npos) << all_table;
  auto [rc, msg] = RunToEnd({DtrunBinary(), "kill", "--run-id", "orphans", "--grace", "2"}, env);
  EXPECT_EQ(rc, 0) << msg;
  for (pid_t p : orphans) EXPECT_TRUE(WaitForPidExit(p, std::chrono::seconds(10)));
  EXPECT_FALSE(WaitForPidExit(bystander.pid(), std::chrono::milliseconds(0)));
  ::kill(bystander.pid(), SIGKILL);
}

TEST(KillCommandTest, KillsARunningJobByRunIdAndStatusListsIt) {
  std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}};
  Harness job({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0", "--rdzv-id", "live",
               Worker("idle_until_stopped.sh")}, env);
  ASSERT_TRUE(job.WaitForOutput("READY 1"));
  auto [src, status] = RunToEnd({DtrunBinary(), "status"}, env);
  EXPECT_EQ(src, 0);
  EXPECT_NE(status.find("live"), std::string::npos) << status;
  auto [rc, msg] = RunToEnd({DtrunBinary(), "kill", "--run-id", "live"}, env);
  EXPECT_EQ(rc, 0) << msg;
  EXPECT_TRUE(job.Wait(std::chrono::seconds(30)).has_value());
}

TEST(KillCommandTest, RequiresARunIdOrAll) {
  auto [rc, msg] = RunToEnd({DtrunBinary(), "kill"});
  EXPECT_EQ(rc, 2);
  EXPECT_NE(msg.find("--run-id"), std::string::npos);
  auto [rc2, msg2] = RunToEnd({DtrunBinary(), "kill", "--run-id", "nothing-like-this"},
                              {{"DTRUN_RUNTIME_DIR", MakeTempDir()}});
  EXPECT_EQ(rc2, 1);
}

}  // namespace
}  // namespace dtrun::testing
