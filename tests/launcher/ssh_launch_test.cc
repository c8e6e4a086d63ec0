// `dtrun -H`: the host lists, the plan each host's dtrun gets, and the control lines it reads.
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/control_stdin.h"
#include "launcher/host_list.h"
#include "launcher/launch_config.h"
#include "launcher/ssh_launch_plan.h"
#include "launcher/summary_dedup.h"
#include "tests/support/status_matchers.h"

namespace dtrun {
namespace {

using ::dtrun::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class LaunchHost : public HostProbe {
 public:
  AcceleratorInventory Accelerators() const override { return {}; }
  int CpuCount() const override { return 8; }
  CpuTopology Cpus() const override { return {}; }
  absl::StatusOr<std::string> FindExecutable(const std::string& program) const override {
    return "/usr/bin/" + program;
  }
  bool Readable(const std::string&) const override { return true; }
  std::optional<std::string> InterfaceWithAddress(const std::string&) const override { return std::nullopt; }
  std::optional<std::string> LocalAddressFacing(const std::string&, int) const override { return std::nullopt; }
  bool IsThisHost(const std::string&) const override { return false; }
  std::string ThisExecutable() const override { return "/opt/dtrun/bin/dtrun"; }
  std::string WorkingDirectory() const override { return "/home/me/my job"; }
};

absl::StatusOr<SshLaunch> Plan(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  LaunchHost host;
  absl::StatusOr<ParsedCommandLine> p = ParseCommandLine(args, env, host);
  if (!p.ok()) return p.status();
  if (!p->ssh_launch) return absl::UnknownError("no ssh launch");
  return *p->ssh_launch;
}

std::vector<std::string> Names(const std::vector<HostSlots>& hosts) {
  std::vector<std::string> out;
  for (const HostSlots& h : hosts) out.push_back(absl::StrCat(h.name, "/", h.slots, "/", h.address()));
  return out;
}

TEST(HostListTest, HorovodrunsHostListAndTheHostfilesOfMpirunAndDeepSpeed) {
  EXPECT_THAT(Names(*ParseHostList("a:4, b:2,me@c", 64)), ElementsAre("a/4/a", "b/2/b", "me@c/0/c"));
  auto file = ParseHostfile("# the nodes\nnode-1 slots=8\n\nnode-2:4   # a comment\nnode_3 slots=2 max_slots=4\nn4\n",
                            "hosts.txt", 64);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(Names(*file), ElementsAre("node-1/8/node-1", "node-2/4/node-2", "node_3/2/node_3", "n4/0/n4"));
}

TEST(HostListTest, ANameSshOrAShellWouldReadAsSomethingElseIsRefused) {
  for (const char* bad : {"-oProxyCommand=x", "a;reboot", "a b", "$(id)", "a:0", "a:x", "a:65", "@a", "a@", ":4", ""}) {
    EXPECT_THAT(ParseHostList(bad, 64), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-H"))) << bad;
  }
  EXPECT_THAT(ParseHostList("a:2,b,a:4", 64), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names a twice")));
  EXPECT_THAT(ParseHostfile("a slots=2\nb nslots=4\n", "hosts.txt", 64),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--hostfile hosts.txt line 2: 'nslots=4'")));
  EXPECT_THAT(ParseHostfile("# nothing\n", "empty.txt", 64),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no host")));
}

TEST(SshLaunchPlanTest, EveryHostIsANodeOfOneJobWhoseRendezvousTheFirstHostServes) {
  auto l = Plan({"-H", "gpu1:4,me@gpu2", "--nproc-per-node", "2", "--max-restarts", "3", "train.py", "-H", "x"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->endpoint, "gpu1:29400");
  EXPECT_EQ(l->nnodes, "2:2");
  EXPECT_EQ(l->min_nodes, 2);
  EXPECT_EQ(l->run_id.size(), 12u);
  EXPECT_EQ(l->remote_dtrun, "/opt/dtrun/bin/dtrun");
  EXPECT_EQ(l->cwd, "/home/me/my job");
  EXPECT_THAT(RemoteDtrunArgv(*l, 0),
              ElementsAre("--nnodes", "2:2", "--nproc-per-node", "4", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                          "gpu1:29400", "--rdzv-id", l->run_id, "--rdzv-conf", "is_host=1", "--node-rank", "0"));
  EXPECT_THAT(RemoteDtrunArgv(*l, 1)[3], "2");  // listed without :N
  EXPECT_THAT(RemoteDtrunArgv(*l, 1), ::testing::IsSupersetOf({"is_host=0", "1"}));
  EXPECT_EQ(RemoteDtrunArgv(*l, 1).back(), "1");  // --node-rank: rank 0 on gpu1, whoever joins first
  // The flags the plan owns are not repeated; the program's own arguments are untouched.
  EXPECT_THAT(l->node_args, ElementsAre("--log-line-prefix-template", "[${role_name}${rank}]:", "--max-restarts", "3",
                                        "train.py", "-H", "x"));
  EXPECT_THAT(SshArgv(*l, 1), ElementsAre("ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o",
                                          "ServerAliveCountMax=6", "me@gpu2", RemoteCommand(*l, 1)));
}

// IPv6 addresses come in brackets, as in URLs and torchrun's --master-addr: ssh gets the bare
// address, the rendezvous endpoint the bracketed one.
TEST(HostListTest, IPv6AddressesInBrackets) {
  auto hosts = ParseHostList("[fd00::1]:4,me@[fd00::2],[fe80::3%eth0]:2", 64);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(Names(*hosts), ElementsAre("fd00::1/4/fd00::1", "me@fd00::2/0/fd00::2", "fe80::3%eth0/2/fe80::3%eth0"));
  EXPECT_EQ((*hosts)[0].endpoint_host(), "[fd00::1]");
  EXPECT_EQ((*hosts)[1].spec(), "me@[fd00::2]");
  EXPECT_EQ((*hosts)[2].spec(), "[fe80::3%eth0]:2");
  auto file = ParseHostfile("[::1] slots=2\n[2001:DB8:0::7]:3\n", "hosts.txt", 64);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(Names(*file), ElementsAre("::1/2/::1", "2001:db8::7/3/2001:db8::7"));  // in canonical form
  EXPECT_THAT(ParseHostList("[::1]:2,[0:0::1]:2", 64),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  for (const char* bad : {"fd00::1", "[fd00::1", "[fd00::1]x", "[fd00::1]:", "[zz::1]", "[::1%]", "[::1%a;b]",
                          "[::1]:0", "[1.2.3.4]", "-x@[::1]", "[::1%-oProxyCommand=x]"}) {
    EXPECT_THAT(ParseHostList(bad, 64), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-H"))) << bad;
  }
  // The fuzzer's find: inet_pton stops at a NUL, and the bytes after it came through in the name.
  EXPECT_THAT(ParseHostList(std::string("[::1\0;reboot]", 14), 64),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("IPv6")));
  auto l = Plan({"-H", "[fd00::1]:2,[fd00::2]:2", "train.py"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->endpoint, "[fd00::1]:29400");
  EXPECT_EQ(SshArgv(*l, 1)[7], "fd00::2");
}

TEST(SshLaunchPlanTest, TheUsersRendezvousSettingsAndElasticRangeAreKept) {
  auto l = Plan({"--hosts=a:1,b:1,c:1", "--nnodes", "2:3", "--rdzv-id", "job7", "--master-port", "29999", "--rdzv-conf",
                 "join_timeout=60", "--rdzv-token", "secret", "--ssh-command", "ssh -p 2222",
                 "--log-line-prefix-template", "", "train.py"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->nnodes, "2:3");
  EXPECT_EQ(l->min_nodes, 2);
  EXPECT_EQ(l->run_id, "job7");
  EXPECT_EQ(l->endpoint, "a:29999");
  EXPECT_THAT(RemoteDtrunArgv(*l, 2), ::testing::Contains("join_timeout=60,is_host=0"));
  EXPECT_EQ(RemoteDtrunArgv(*l, 2).back(), "2");  // --node-rank
  // A host past the maximum is a spare: no place to ask for, it takes a free one.
  auto spare = Plan({"-H", "a,b,c", "--nnodes", "2", "train.py"});
  ASSERT_TRUE(spare.ok()) << spare.status();
  EXPECT_EQ(RemoteDtrunArgv(*spare, 1).back(), "1");
  EXPECT_THAT(RemoteDtrunArgv(*spare, 2), ::testing::Not(::testing::Contains("--node-rank")));
  // The user's options first: ssh keeps an option's first value.
  EXPECT_THAT(l->ssh, ElementsAre("ssh", "-p", "2222", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o",
                                  "ServerAliveCountMax=6"));
  EXPECT_THAT(l->node_args, ElementsAre("--log-line-prefix-template", "", "train.py"));  // the token is not here
  ASSERT_TRUE(LoadSshLaunchFiles(*l).ok());
  EXPECT_EQ(l->token, "secret");
}

TEST(SshLaunchPlanTest, WhereTheNodesMeetCannotBeGivenAndTooFewHostsAreNamed) {
  for (const char* flag : {"--node-rank", "--rdzv-endpoint", "--master-addr", "--local-addr", "--rdzv-backend"}) {
    EXPECT_THAT(
        Plan({"-H", "a,b", flag, "1", "train.py"}),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(absl::StrCat(flag, " cannot be given with -H"))));
  }
  EXPECT_THAT(Plan({"-H", "a,b", "--nnodes", "3", "train.py"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--nnodes 3 needs 3 hosts, but 2 are listed")));
  EXPECT_THAT(Plan({"-H", "a", "--hostfile", "f", "train.py"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not both")));
  EXPECT_THAT(Plan({"-H", "a"}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no PROGRAM")));
  EXPECT_THAT(Plan({"-x", "A=1", "train.py"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--env is for starting a job on several hosts")));
}

TEST(SshLaunchPlanTest, TheHostsGetTheJobsEnvironmentButNeverTheToken) {
  std::map<std::string, std::string> env = {{"PATH", "/venv/bin:/usr/bin"},
                                            {"NCCL_DEBUG", "INFO"},
                                            {"CUDA_VISIBLE_DEVICES", "0,1"},
                                            {"DTRUN_RDZV_TOKEN", "t"},
                                            {"HOME", "/home/me"},
                                            {"SSH_AUTH_SOCK", "/tmp/agent"},
                                            {"MYVAR", "1"}};
  auto l = Plan({"-H", "a", "-x", "MYVAR", "-x", "SEED=7", "--env", "UNSET_HERE", "train.py"}, env);
  ASSERT_TRUE(l.ok()) << l.status();
  std::vector<std::string> got;
  for (const auto& [k, v] : l->env) got.push_back(k + "=" + v);
  EXPECT_THAT(
      got, ElementsAre("CUDA_VISIBLE_DEVICES=0,1", "MYVAR=1", "NCCL_DEBUG=INFO", "PATH=/venv/bin:/usr/bin", "SEED=7"));
  EXPECT_THAT(l->node_args, ElementsAre("--log-line-prefix-template", "[${role_name}${rank}]:", "train.py"));
  EXPECT_THAT(Plan({"-H", "a", "-x", "BAD-NAME", "train.py"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a variable name")));
  auto fresh = Plan({"-H", "a", "train.py"});
  ASSERT_TRUE(LoadSshLaunchFiles(*fresh).ok());
  EXPECT_EQ(fresh->token.size(), 32u);  // none given: only the hosts started here can join
}

std::string Joined(SummaryDedup& d, int stream, std::vector<std::string> lines) {
  std::string out;
  for (std::string& line : lines) {
    for (const std::string& o : d.Feed(stream, line + "\n")) out += o;
  }
  for (const std::string& o : d.Flush(stream)) out += o;
  return out;
}

TEST(SummaryDedupTest, EveryHostsCopyOfTheJobsFailureSummaryIsShownOnce) {
  const std::string rule(60, '=');
  const std::vector<std::string> summary = {rule, "train.py FAILED", "Root Cause:", "  rank : 1", rule};
  std::vector<std::string> host0 = {"[dtrun h0] round 0 ended"};
  host0.insert(host0.end(), summary.begin(), summary.end());
  host0.push_back("hint after it");
  SummaryDedup d;
  EXPECT_EQ(Joined(d, 0, host0), absl::StrJoin(host0, "\n") + "\n");
  EXPECT_EQ(Joined(d, 1, summary), "");  // the same text from another host
  EXPECT_EQ(d.dropped(), 1);
  // A different summary, a rule that begins no summary, and one cut off by the stream's end pass.
  EXPECT_EQ(Joined(d, 2, {rule, "other.py FAILED", rule}), absl::StrCat(rule, "\nother.py FAILED\n", rule, "\n"));
  EXPECT_EQ(Joined(d, 3, {rule, "a table", rule}), absl::StrCat(rule, "\na table\n", rule, "\n"));
  EXPECT_EQ(Joined(d, 4, {rule, "x.py FAILED", "cut"}), absl::StrCat(rule, "\nx.py FAILED\ncut\n"));
  EXPECT_EQ(d.dropped(), 1);
}

// What each host prints after the summary is shown once too where it is the same, not where it
// differs (another Python on that host), and never a line of its own before the summary.
TEST(SummaryDedupTest, LinesAfterTheSummaryThatAnotherHostPrintedAreShownOnce) {
  const std::string rule(60, '=');
  const std::vector<std::string> summary = {rule, "train.py FAILED", "Root Cause:", "  rank : 1", rule};
  auto host = [&](const std::string& python, const std::string& name) {
    std::vector<std::string> lines = {"the workers' Python was " + python};  // before: always shown
    lines.insert(lines.end(), summary.begin(), summary.end());
    lines.push_back("the workers' Python was " + python);
    lines.push_back("[dtrun " + name + "] stopped");
    return lines;
  };
  SummaryDedup d;
  EXPECT_EQ(Joined(d, 0, host("/usr/bin/python3", "h0")), absl::StrJoin(host("/usr/bin/python3", "h0"), "\n") + "\n");
  EXPECT_EQ(Joined(d, 1, host("/usr/bin/python3", "h1")),
            "the workers' Python was /usr/bin/python3\n[dtrun h1] stopped\n");
  EXPECT_EQ(Joined(d, 2, host("/opt/venv/bin/python", "h2")),
            "the workers' Python was /opt/venv/bin/python\nthe workers' Python was /opt/venv/bin/python\n[dtrun h2] "
            "stopped\n");
  EXPECT_EQ(d.dropped(), 2);
}

TEST(ControlStdinTest, TheTokenAndTheSignalsAreTheOnlyLines) {
  ControlLine t = ParseControlLine("token abc def\r");
  EXPECT_EQ(t.kind, ControlLine::Kind::kToken);
  EXPECT_EQ(t.token, "abc def");
  EXPECT_EQ(ParseControlLine("signal SIGINT").signal, SIGINT);
  EXPECT_EQ(ParseControlLine("signal TERM").signal, SIGTERM);
  EXPECT_EQ(ParseControlLine("signal SIGKILL").kind, ControlLine::Kind::kUnknown);  // not a stop the agent handles
  EXPECT_EQ(ParseControlLine("signal 9").kind, ControlLine::Kind::kUnknown);
  EXPECT_EQ(ParseControlLine("exec rm -rf /").kind, ControlLine::Kind::kUnknown);
}

TEST(ControlStdinTest, InputLinesCarryAnyBytesWithinTheLineLimit) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  while (bytes.size() < kMaxInputChunk) bytes += "\n\r\\\x80";
  bytes.resize(kMaxInputChunk);
  const std::string line = InputLine(bytes);
  EXPECT_LE(line.size(), kMaxControlLine);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line, whatever the bytes
  ControlLine c = ParseControlLine(line.substr(0, line.size() - 1));
  EXPECT_EQ(c.kind, ControlLine::Kind::kInput);
  EXPECT_EQ(c.input, bytes);
  EXPECT_EQ(ParseControlLine("input-end").kind, ControlLine::Kind::kInputEnd);
  EXPECT_EQ(ParseControlLine("stdin terminal").kind, ControlLine::Kind::kStdinTerminal);
  // Not what dtrun sends: a bad escape, nothing, more than a chunk.
  EXPECT_EQ(ParseControlLine("input \\q").kind, ControlLine::Kind::kUnknown);
  EXPECT_EQ(ParseControlLine("input ").kind, ControlLine::Kind::kUnknown);
  EXPECT_EQ(ParseControlLine("input " + std::string(kMaxInputChunk + 1, 'x')).kind, ControlLine::Kind::kUnknown);
}

}  // namespace
}  // namespace dtrun
