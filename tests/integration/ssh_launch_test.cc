// `dtrun -H`: one command on one machine starts the job on network-namespace hosts. The remote
// shell is a stand-in for ssh (the same argv, `ssh HOST COMMAND`; the command runs under sh in
// the host's namespace with ssh's stdin), so no SSH server or keys are needed: what is tested is
// dtrun's side — the command line each host runs, the token on stdin, the relayed output, and
// that a stop, a killed launcher or an unreachable host leaves no process anywhere.
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/process_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/launch_config.h"
#include "launcher/ssh_launch_plan.h"
#include "tests/support/netns_cluster.h"
#include "tests/support/process_harness.h"
#include "tests/support/pty_session.h"
#include "tests/support/status_probe.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WriteExecutable(const std::string& path, const std::string& text) {
  {
    std::ofstream f(path);
    f << text;
  }
  ::chmod(path.c_str(), 0755);
  return path;
}

class SshLaunchTest : public NetnsTest {
 protected:
  void Cluster(int hosts) {
    NetnsTest::Cluster(hosts);
    // ssh's contract: `ssh [-o OPTION]... HOST COMMAND` runs COMMAND with the remote shell, its stdin fed from
    // ssh's; a killed ssh leaves the command running with its stdin ended. An unknown host is
    // ssh's exit code 255. (A background command's stdin is /dev/null before its redirections:
    // hence fd 3.)
    // Each host has its own runtime directory, as another machine would: the registry here holds
    // the launcher's entry alone.
    const std::string runtime = MakeTempDir();
    std::string cases;
    for (int i = 0; i < hosts; ++i) {
      absl::StrAppend(&cases, "  ", cluster_->address(i), "|", cluster_->address6(i), ") ns=", cluster_->Exec(i).back(),
                      "; export DTRUN_RUNTIME_DIR=", runtime, "/host", i, " SSH_TEST_HOST=", i, " ;;\n");
    }
    ssh_ = WriteExecutable(MakeTempDir() + "/ssh",
                           absl::StrCat("#!/bin/sh\n"
                                        "while [ \"$1\" = -o ]; do shift 2; done  # the options dtrun adds\n"
                                        "host=$1; shift\n"
                                        "case \"$host\" in\n",
                                        cases,
                                        "  *) echo \"ssh: Could not resolve hostname $host\" >&2; exit 255 ;;\n"
                                        "esac\n"
                                        "exec 3<&0\n"
                                        "ip netns exec \"$ns\" sh -c \"$*\" <&3 3<&- &\n"
                                        "wait $!\n"));
    mark_ = absl::StrCat("ssh-launch-", ::getpid(), "-", ++launches_);
  }
  // dtrun -H on the test machine itself, the hosts' addresses as their names; `conf` is added to
  // --rdzv-conf.
  std::vector<std::string> LaunchArgv(const std::string& hosts, std::vector<std::string> rest,
                                      const std::string& conf = "") const {
    std::vector<std::string> argv = {DtrunBinary(), "-H", hosts, "--ssh-command", ssh_, "-x", "SSH_LAUNCH_MARK",
                                     "--rdzv-conf", "keep_alive_interval=0.5,keep_alive_max_attempt=4" + conf};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return argv;
  }
  std::map<std::string, std::string> LaunchEnv() const {
    return {{"SSH_LAUNCH_MARK", mark_}, {"PYTHON_EXEC", TorchPython().value_or("/usr/bin/python3")}};
  }
  std::unique_ptr<Harness> Launch(const std::string& hosts, std::vector<std::string> rest, const std::string& conf = "",
                                  bool pipe_stdin = false) {
    return std::make_unique<Harness>(LaunchArgv(hosts, std::move(rest), conf), LaunchEnv(), pipe_stdin);
  }
  // The processes this launch started on any host (dtrun, workers; not the launcher's own).
  std::vector<ProcessEntry> Started(pid_t launcher) const {
    std::vector<ProcessEntry> found;
    for (ProcessEntry& p : FindProcessesWithEnv("SSH_LAUNCH_MARK", mark_)) {
      if (p.pid != launcher) found.push_back(std::move(p));
    }
    return found;
  }
  // Every one of `procs` ends within the bound.
  static void ExpectAllGone(const std::vector<ProcessEntry>& procs) {
    for (const ProcessEntry& p : procs)
      EXPECT_TRUE(WaitForPidExit(p.pid, seconds(60))) << "left running: " << p.cmdline;
  }
  std::string Host(int i) const { return cluster_->address(i); }

  std::string ssh_, mark_;
  static inline int launches_ = 0;
};

TEST_F(SshLaunchTest, OneCommandStartsAPythonJobOnTwoHostsWithTheirOwnWorkerCounts) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  auto job = Launch(absl::StrCat(Host(0), ":2,", Host(1), ":1"), {Worker("gloo_allreduce.py")});
  EXPECT_EQ(job->Wait(seconds(180)), 0) << job->all();
  for (int rank = 0; rank < 3; ++rank) {
    // The global rank tells the hosts' lines apart on the one console.
    EXPECT_THAT(job->out(), HasSubstr(absl::StrCat("[default", rank, "]:ALLREDUCE_OK rank=", rank, " world=3 sum=6")));
  }
  EXPECT_THAT(job->err(), HasSubstr("starting the job on 2 hosts over ssh"));
  // Each host's dtrun lines say which host they come from.
  EXPECT_THAT(job->err(), HasSubstr(absl::StrCat("[dtrun ", Host(0), "] hosting the rendezvous")));
  ExpectAllGone(Started(job->pid()));
}

// Hosts named by their IPv6 addresses, in brackets: ssh gets the bare address, the nodes meet at
// [ADDR]:PORT, and the workers' process group forms over IPv6.
TEST_F(SshLaunchTest, HostsNamedByIpv6AddressesRunOneJob) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  const std::string first = cluster_->address6(0), second = cluster_->address6(1);
  auto job = Launch(absl::StrCat("[", first, "]:1,[", second, "]:2"), {Worker("gloo_allreduce.py")});
  EXPECT_EQ(job->Wait(seconds(180)), 0) << job->all();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(job->out(), HasSubstr(absl::StrCat("[default", rank, "]:ALLREDUCE_OK rank=", rank, " world=3 sum=6")));
  }
  EXPECT_THAT(job->err(), HasSubstr(absl::StrCat("rendezvous on [", first, "]:")));
  EXPECT_THAT(job->err(), HasSubstr(absl::StrCat("[dtrun ", first, "] hosting the rendezvous")));
  ExpectAllGone(Started(job->pid()));
}

TEST_F(SshLaunchTest, CtrlCOnTheLaunchingHostStopsEveryHostsWorkers) {
  Cluster(2);
  auto job = Launch(absl::StrCat(Host(0), ",", Host(1)), {"--no-python", Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(job->WaitForOutput("READY 0")) << job->all();
  ASSERT_TRUE(job->WaitForOutput("READY 1")) << job->all();
  const std::vector<ProcessEntry> started = Started(job->pid());
  ::kill(job->pid(), SIGINT);
  EXPECT_EQ(job->Wait(seconds(90)), 128 + SIGINT) << job->all();
  EXPECT_THAT(job->err(), HasSubstr("got SIGINT; passing it to every host"));
  EXPECT_THAT(job->err(), HasSubstr(absl::StrCat("[dtrun ", Host(1), "] ")));
  EXPECT_GE(started.size(), 4u);  // on each host: its dtrun and its worker at least
  ExpectAllGone(started);
}

// The launcher killed outright (an OOM kill, a lost login session): its ssh processes die with it,
// every host's dtrun sees its stdin end and stops its workers.
TEST_F(SshLaunchTest, AKilledLauncherLeavesNoProcessOnAnyHost) {
  Cluster(2);
  auto job = Launch(absl::StrCat(Host(0), ",", Host(1)), {"--no-python", Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(job->WaitForOutput("READY 0")) << job->all();
  ASSERT_TRUE(job->WaitForOutput("READY 1")) << job->all();
  const std::vector<ProcessEntry> started = Started(job->pid());
  EXPECT_GE(started.size(), 4u);
  ::kill(job->pid(), SIGKILL);
  EXPECT_EQ(job->Wait(seconds(30)), 128 + SIGKILL);
  ExpectAllGone(started);
}

TEST_F(SshLaunchTest, AnUnreachableHostIsNamedAndTheOthersAreStopped) {
  Cluster(1);
  auto job = Launch(absl::StrCat(Host(0), ",no-such-host"), {"--no-python", Worker("idle_until_stopped.sh")});
  EXPECT_EQ(job->Wait(seconds(120)), 255) << job->all();
  EXPECT_THAT(job->err(), HasSubstr("host no-such-host: dtrun exited with 255 (ssh could not reach the host"));
  EXPECT_THAT(job->err(), HasSubstr("too few hosts are left for --nnodes 2:2; stopping the others"));
  ExpectAllGone(Started(job->pid()));
}

// Every host learns the job's failure and prints its summary; the one console shows it once.
TEST_F(SshLaunchTest, AFailedJobsSummaryIsShownOnceAndItsExitCodeIsTheRootCauses) {
  Cluster(2);
  const std::string worker =
      WriteExecutable(MakeTempDir() + "/rank1_fails.sh", "#!/bin/sh\n[ \"$RANK\" = 1 ] && exit 3\nexec sleep 300\n");
  auto job = Launch(absl::StrCat(Host(0), ",", Host(1)), {"--no-python", worker});
  EXPECT_EQ(job->Wait(seconds(90)), 3) << job->all();
  const std::string& err = job->err();
  size_t summaries = 0;
  for (size_t at = 0; (at = err.find("rank1_fails.sh FAILED", at)) != std::string::npos; ++at) ++summaries;
  EXPECT_EQ(summaries, 1u) << err;
  EXPECT_THAT(err, HasSubstr("(1 other host printed the same failure summary)"));
  ExpectAllGone(Started(job->pid()));
}

// An elastic job (--nnodes 2:3) does without the host ssh cannot reach, and succeeds.
TEST_F(SshLaunchTest, AnElasticJobGoesOnWithoutAnUnreachableHost) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  auto job = Launch(absl::StrCat(Host(0), ",no-such-host,", Host(1)), {"--nnodes", "2:3", Worker("gloo_allreduce.py")},
                    ",last_call_timeout=1");
  EXPECT_EQ(job->Wait(seconds(180)), 0) << job->all();
  EXPECT_THAT(job->err(), HasSubstr("host no-such-host: dtrun exited with 255 (ssh could not reach the host"));
  EXPECT_THAT(job->err(), HasSubstr("the job goes on with 2 hosts (--nnodes 2:3)"));
  EXPECT_THAT(job->out(), HasSubstr("ALLREDUCE_OK rank=1 world=2 sum=3"));
  ExpectAllGone(Started(job->pid()));
}

// breakpoint() on another host, answered from the launching dtrun's terminal: the prompt shows with
// its rank although it has no newline, and what is typed goes to the host that prompted.
TEST_F(SshLaunchTest, ABreakpointOnAnotherHostIsAnsweredFromTheLaunchingTerminal) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  std::map<std::string, std::string> env = LaunchEnv();
  env["PYTHONBREAKPOINT"] = "";
  PtySession term(LaunchArgv(absl::StrCat(Host(0), ":1,", Host(1), ":1"),
                             {"-x", "PYTHONBREAKPOINT", Worker("breakpoint_one_rank.py")}),
                  env);
  ASSERT_TRUE(term.started());
  ASSERT_TRUE(term.WaitFor("[default1]:(Pdb) ", seconds(120))) << term.output();
  size_t mark = term.output().size();
  term.Type("p secret * 10\n");
  ASSERT_TRUE(term.WaitFor("[default1]:430", seconds(60), mark)) << term.output();
  term.Type("c\n");
  EXPECT_EQ(term.Wait(seconds(120)), 0) << term.output();
  EXPECT_NE(term.output().find("DONE rank=1 secret=1043"), std::string::npos) << term.output();
  EXPECT_NE(term.output().find("DONE rank=0 secret=42"), std::string::npos) << term.output();
}

// Input piped to the launching dtrun reaches the first host's worker when no rank prompts, and its
// end reaches every host's workers. Rank 0 is on the first host whichever host joined the
// rendezvous first (each host's --node-rank is its place in the list; CI once had host 1 first).
TEST_F(SshLaunchTest, PipedInputReachesTheFirstHostAndItsEndReachesEveryHost) {
  Cluster(2);
  auto job = Launch(absl::StrCat(Host(0), ",", Host(1)),
                    {"--no-python", "/bin/sh", "-c",
                     "if [ $SSH_TEST_HOST = 0 ]; then read line; echo \"got $line on host 0\"; fi; "
                     "read more || echo \"EOF host=$SSH_TEST_HOST\""},
                    "", /*pipe_stdin=*/true);
  ASSERT_TRUE(job->WriteStdin("hello there\n"));
  ASSERT_TRUE(job->WaitForOutput("[default0]:got hello there on host 0")) << job->all();
  job->CloseStdin();
  EXPECT_EQ(job->Wait(seconds(120)), 0) << job->all();
  EXPECT_THAT(job->out(), HasSubstr("[default0]:EOF host=0"));
  EXPECT_THAT(job->out(), HasSubstr("[default1]:EOF host=1"));
  ExpectAllGone(Started(job->pid()));
}

// A file as the launcher's stdin (`dtrun -H ... < answers`) is routed as piped input is: epoll
// refuses regular files, so a thread feeds it into a pipe (base/file_feed.h). Before, every host
// saw only the end of its input.
TEST_F(SshLaunchTest, AFileOnStdinIsRoutedAsPipedInputIs) {
  Cluster(2);
  const std::string answers = MakeTempDir() + "/answers";
  std::ofstream(answers) << "hello from a file\n";
  std::vector<std::string> argv = {"/bin/sh", "-c", absl::StrCat("exec \"$0\" \"$@\" < ", answers)};
  for (std::string& a : LaunchArgv(absl::StrCat(Host(0), ",", Host(1)),
                                   {"--no-python", "/bin/sh", "-c",
                                    "if [ $SSH_TEST_HOST = 0 ]; then read line; echo \"got $line on host 0\"; fi; "
                                    "read more || echo \"EOF host=$SSH_TEST_HOST\""})) {
    argv.push_back(std::move(a));
  }
  Harness job(argv, LaunchEnv());
  EXPECT_EQ(job.Wait(seconds(120)), 0) << job.all();
  EXPECT_THAT(job.out(), HasSubstr("[default0]:got hello from a file on host 0"));
  EXPECT_THAT(job.out(), HasSubstr("[default0]:EOF host=0"));
  EXPECT_THAT(job.out(), HasSubstr("[default1]:EOF host=1"));
  ExpectAllGone(Started(job.pid()));
}

// On the launching machine, `dtrun status` shows the hosts' workers (the launcher kept the job's
// fresh token for it) and `dtrun kill` stops every host through the launcher.
TEST_F(SshLaunchTest, OnTheLaunchingMachineStatusShowsEveryHostAndKillStopsThemAll) {
  Cluster(2);
  const std::string run_id = absl::StrCat("ssh-status-", ::getpid());
  auto job = Launch(absl::StrCat(Host(0), ",", Host(1)),
                    {"--rdzv-id", run_id, "--no-python", Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(job->WaitForOutput("READY 0")) << job->all();
  ASSERT_TRUE(job->WaitForOutput("READY 1")) << job->all();
  const std::vector<ProcessEntry> started = Started(job->pid());
  // Asked from where the rendezvous can be reached (the test machine itself has no route to the
  // hosts' network); the registry is this machine's all the same.
  auto ask = [&] {
    std::vector<std::string> argv = cluster_->Exec(1);
    argv.insert(argv.end(), {DtrunBinary(), "status", "--json", "--run-id", run_id});
    return ParseJsonLines(RunToEnd(argv).second);
  };
  const nlohmann::json status = AwaitStatus(ask, [](const nlohmann::json& j) { return j["nodes"].size() == 2; });
  EXPECT_EQ(status.value("run_id", ""), run_id) << status.dump();
  ASSERT_EQ(status["nodes"].size(), 2u) << status.dump();
  const auto [rc, listed] = RunToEnd({DtrunBinary(), "kill", "--run-id", run_id, "--dry-run"});
  EXPECT_THAT(listed, HasSubstr(absl::StrCat(job->pid(), " ")));
  EXPECT_THAT(listed, HasSubstr("ssh -H"));
  EXPECT_EQ(RunToEnd({DtrunBinary(), "kill", "--run-id", run_id}).first, 0);
  EXPECT_EQ(job->Wait(seconds(90)), 128 + SIGTERM) << job->all();
  EXPECT_THAT(job->err(), HasSubstr("got SIGTERM; passing it to every host"));
  ExpectAllGone(started);
  EXPECT_THAT(RunToEnd({DtrunBinary(), "status", "--run-id", run_id}).second, HasSubstr("no dtrun job with run id"));
}

// What a remote shell runs: every word arrives as it was, quotes, spaces and $ included.
TEST(SshLaunchCommandTest, TheRemoteCommandReachesDtrunWordForWordThroughAShell) {
  const std::string dir = MakeTempDir();
  const std::string fake = WriteExecutable(
      dir + "/it's dtrun",
      "#!/bin/sh\nprintf 'cwd=%s\\n' \"$(pwd)\"\nprintf 'env=%s\\n' \"$ODD\"\nfor a; do printf '%s\\n' \"$a\"; done\n");
  absl::StatusOr<ParsedCommandLine> p =
      ParseCommandLine({"-H", "a", "-x", "ODD=a'b $HOME `x`", "train.py", "it's", "$HOME", "a b"}, {});
  ASSERT_TRUE(p.ok() && p->ssh_launch) << p.status();
  SshLaunch l = *p->ssh_launch;
  l.remote_dtrun = fake;
  l.cwd = dir;
  auto [code, out] = RunToEnd({"/bin/sh", "-c", RemoteCommand(l, 0)});
  EXPECT_EQ(code, 0) << out;
  std::vector<std::string> lines = absl::StrSplit(out, '\n');
  ASSERT_GE(lines.size(), 7u) << out;
  EXPECT_EQ(lines[0], "cwd=" + dir);
  EXPECT_EQ(lines[1], "env=a'b $HOME `x`");
  EXPECT_EQ(lines[2], kControlStdinFlag);
  EXPECT_THAT(std::vector<std::string>(lines.end() - 4, lines.end() - 1), ElementsAre("it's", "$HOME", "a b"));
}

}  // namespace
}  // namespace dtrun::testing
