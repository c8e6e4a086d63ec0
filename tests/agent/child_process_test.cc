#include "agent/child_process.h"

#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "base/executable.h"
#include "gtest/gtest.h"
#include "tests/support/child_output.h"

namespace dtrun {
namespace {

using ::dtrun::testing::OutputToExit;

TEST(ChildProcessTest, RunsInItsOwnProcessGroupWithCapturedOutput) {
  SpawnRequest req;
  req.executable = "/bin/sh";
  req.argv = {"sh", "-c", "echo pgid=$(ps -o pgid= -p $$ | tr -d ' ') pid=$$"};
  req.env = {"PATH=/bin:/usr/bin"};
  absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(req);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string out = OutputToExit(*p);
  std::string pid = std::to_string(p->pid());
  EXPECT_EQ(out, "pgid=" + pid + " pid=" + pid + "\n");
}

TEST(ChildProcessTest, ExecFailureIsReportedAsStatus) {
  SpawnRequest req;
  req.executable = "/nonexistent/program";
  req.argv = {"program"};
  absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(req);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ChildProcessTest, FindExecutableExplainsWhatIsWrong) {
  EXPECT_EQ(FindExecutable("definitely-not-a-program-xyz").status().code(), absl::StatusCode::kNotFound);
  std::string plain = ::testing::TempDir() + "/not_executable";
  std::fclose(std::fopen(plain.c_str(), "w"));
  ::chmod(plain.c_str(), 0644);
  EXPECT_EQ(FindExecutable(plain).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(FindExecutable("/tmp").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(FindExecutable("sh").ok());
}

TEST(ChildProcessTest, DestroyingARunningChildKillsAndReapsIt) {
  pid_t pid;
  {
    SpawnRequest req;
    req.executable = "/bin/sleep";
    req.argv = {"sleep", "300"};
    absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(req);
    ASSERT_TRUE(p.ok());
    pid = p->pid();
  }
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);  // already reaped: no zombie left
  EXPECT_EQ(errno, ECHILD);
}

TEST(ChildProcessTest, ACpuListBindsTheChildBeforeItsProgramStarts) {
  cpu_set_t ours;
  CPU_ZERO(&ours);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(ours), &ours), 0);
  int last = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &ours)) last = cpu;
  }
  SpawnRequest req;
  req.executable = "/bin/sh";
  req.argv = {"sh", "-c", "grep Cpus_allowed_list /proc/self/status"};
  req.cpus = {last};
  absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(req);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(OutputToExit(*p), "Cpus_allowed_list:\t" + std::to_string(last) + "\n");
}

TEST(ChildProcessTest, ABindingTheKernelRefusesIsReportedAsStatus) {
  SpawnRequest req;
  req.executable = "/bin/true";
  req.argv = {"true"};
  req.cpus = {65000};  // no such CPU
  absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(req);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("cannot bind a worker to its CPUs"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace dtrun
