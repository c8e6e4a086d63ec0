#include "launcher/launch_config.h"
#include "base/build_info.h"
#include "launcher/command_line_token.h"
#include "launcher/slurm_env.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun {
namespace {

using ::dtrun::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::map<std::string, std::string> Env() { return {{"PYTHON_EXEC", "/bin/sh"}}; }

absl::StatusOr<LaunchConfig> Parse(std::vector<std::string> args,
                                   std::map<std::string, std::string> env = Env()) {
  absl::StatusOr<ParsedCommandLine> p = ParseCommandLine(args, env);
  if (!p.ok()) return p.status();
  if (!p->config) return absl::UnknownError("no config");
  return *p->config;
}

TEST(LaunchConfigTest, AcceptsBothSpellingsOfEveryFlag) {
  auto a = Parse({"--nproc-per-node", "3", "--max-restarts=2", "/bin/true"});
  auto b = Parse({"--nproc_per_node", "3", "--max_restarts", "2", "/bin/true"});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->agent.nproc_per_node, 3);
  EXPECT_EQ(b->agent.nproc_per_node, 3);
  EXPECT_EQ(a->agent.max_restarts, 2);
  EXPECT_EQ(b->agent.max_restarts, 2);
}

TEST(LaunchConfigTest, OnStragglerReplaceIsForElasticJobsOnly) {
  auto elastic = Parse({"--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "--on-straggler",
                        "replace", "/bin/true"});
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_TRUE(elastic->rdzv.replace_stragglers);
  auto warn = Parse({"--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "/bin/true"});
  ASSERT_TRUE(warn.ok()) << warn.status();
  EXPECT_FALSE(warn->rdzv.replace_stragglers);
  EXPECT_THAT(Parse({"--standalone", "--on-straggler", "replace", "/bin/true"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("--on-straggler replace needs an elastic multi-node job")));
  EXPECT_THAT(Parse({"--on_straggler", "kill", "/bin/true"}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("--on-straggler kill is not warn or replace")));
}

TEST(LaunchConfigTest, ArgumentsAfterTheProgramAreUntouched) {
  auto c = Parse({"--nproc-per-node", "2", "/bin/echo", "--nproc-per-node", "9", "-m"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->agent.executable, "/bin/echo");
  std::vector<std::string> argv = {"/bin/echo", "--nproc-per-node", "9", "-m"};
  EXPECT_EQ(c->agent.argv, argv);
  EXPECT_EQ(c->agent.nproc_per_node, 2);
}

TEST(LaunchConfigTest, PythonScriptsRunUnbufferedUnderPythonExec) {
  std::string script = ::testing::TempDir() + "/s.py";
  FILE* f = std::fopen(script.c_str(), "w");
  std::fclose(f);
  auto c = Parse({script, "--lr", "0.1"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->agent.executable, "/bin/sh");
  std::vector<std::string> argv = {"/bin/sh", "-u", script, "--lr", "0.1"};
  EXPECT_EQ(c->agent.argv, argv);
  auto m = Parse({"-m", "pkg.mod", "x"});
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::string> margv = {"/bin/sh", "-u", "-m", "pkg.mod", "x"};
  EXPECT_EQ(m->agent.argv, margv);
}

TEST(LaunchConfigTest, PetEnvironmentVariablesSetDefaults) {
  auto env = Env();
  env["PET_NPROC_PER_NODE"] = "5";
  env["PET_MAX_RESTARTS"] = "4";
  // CLI11 reads the process environment for envname(); emulate by exporting.
  setenv("PET_NPROC_PER_NODE", "5", 1);
  setenv("PET_MAX_RESTARTS", "4", 1);
  auto c = Parse({"/bin/true"}, env);
  unsetenv("PET_NPROC_PER_NODE");
  unsetenv("PET_MAX_RESTARTS");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->agent.nproc_per_node, 5);
  EXPECT_EQ(c->agent.max_restarts, 4);
}

TEST(LaunchConfigTest, StandaloneUsesAFreePortAndLoopbackStore) {
  auto c = Parse({"--standalone", "--nproc-per-node", "2", "/bin/true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topology, Topology::kStandalone);
  EXPECT_EQ(c->agent.run_id.size(), 36u);  // a fresh uuid-like run id, set when parsing
  EXPECT_EQ(c->agent.master_port, 0);
  EXPECT_EQ(c->agent.master_addr, "localhost");
  EXPECT_EQ(c->agent.store_bind_addr, "127.0.0.1");
  EXPECT_TRUE(c->omp_warning);
}

TEST(LaunchConfigTest, ASingleNodeJobThatNamesNoPortGetsAFreeOne) {
  auto c = Parse({"--nproc-per-node", "2", "/bin/true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topology, Topology::kSingleNode);
  EXPECT_EQ(c->agent.run_id, "none");  // its run id stays as given
  EXPECT_EQ(c->agent.master_port, 0);
  EXPECT_EQ(c->agent.store_bind_addr, "127.0.0.1");
  // A port or endpoint chosen by flag or PET_ variable, or several nodes: torchrun's 29500 path.
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--master-port", "29501", "/bin/true"},
           {"--master-addr", "127.0.0.1", "/bin/true"},
           {"--rdzv-backend", "static", "/bin/true"},
           {"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "/bin/true"}}) {
    auto given = Parse(args);
    ASSERT_TRUE(given.ok()) << args[0] << ": " << given.status();
    EXPECT_NE(given->agent.master_port, 0) << args[0];
  }
  setenv("PET_MASTER_PORT", "29555", 1);
  auto from_env = Parse({"/bin/true"});
  unsetenv("PET_MASTER_PORT");
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->agent.master_port, 29555);
}

// Newer torchrun's flags, variables and keys: accepted, and applied where dtrun has the feature.
TEST(LaunchConfigTest, NewerTorchrunFlagsVariablesAndKeysDoNotStopDtrun) {
  auto c =
      Parse({"--rdzv-conf", "use_libuv=1,store_type=tcp,rank=0,join_timeout=5", "--virtual-local-rank",
             "--numa-binding", "node", "--event-log-handler", "console", "--duplicate-stdout-filters", "error,loss",
             "--log-dir", "/tmp/logs", "--master-addr", "[::1]", "--master-port", "29511", "/bin/true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->agent.virtual_local_rank);
  EXPECT_EQ(c->agent.master_addr, "::1");
  std::string notes = absl::StrJoin(c->notes, "\n");
  EXPECT_THAT(notes, ::testing::HasSubstr("--rdzv-conf rank, store_type, use_libuv: ignored"));
  EXPECT_THAT(notes, ::testing::HasSubstr("--numa-binding node: local rank 0 on CPUs "));
  EXPECT_THAT(c->agent.duplicate_stdout_filters, ElementsAre("error", "loss"));
  EXPECT_TRUE(c->agent.duplicate_stderr_filters.empty());
  EXPECT_THAT(Parse({"--duplicate-stderr-filters", "x", "/bin/true"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("give --log-dir DIR")));
  // torchrun's environment defaults; a flag wins over them.
  auto env = Env();
  env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "120";
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGTERM,SIGUSR1";
  auto e = Parse({"/bin/true"}, env);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->agent.shutdown_timeout, std::chrono::seconds(120));
  EXPECT_EQ(e->agent.signals_to_handle, (std::vector<int>{SIGTERM, SIGUSR1}));
  auto flag = Parse({"--shutdown-timeout", "5", "/bin/true"}, env);
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->agent.shutdown_timeout, std::chrono::seconds(5));
  env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "soon";
  EXPECT_THAT(Parse({"/bin/true"}, env),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("TORCH_ELASTIC_SHUTDOWN_TIMEOUT='soon'")));
}

TEST(LaunchConfigTest, LegacyLaunchScriptsGetLocalRankArgument) {
  auto c = Parse({"--append-local-rank", "/bin/true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->agent.local_rank_arg, "--local-rank");
  auto u = Parse({"--append-local-rank", "--local-rank-flag", "--local_rank", "/bin/true"});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->agent.local_rank_arg, "--local_rank");
}

TEST(LaunchConfigTest, StreamSpecs) {
  auto all = ParseStreamSpec("--tee", "3", 2);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)[0], 3);
  EXPECT_EQ((*all)[1], 3);
  auto per = ParseStreamSpec("--redirects", "0:1,1:2", 2);
  ASSERT_TRUE(per.ok());
  EXPECT_EQ((*per)[0], 1);
  EXPECT_EQ((*per)[1], 2);
  EXPECT_THAT(ParseStreamSpec("--tee", "4", 2),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("--tee")));
  EXPECT_THAT(ParseStreamSpec("--tee", "0:x", 2),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("--tee")));
}

TEST(LaunchConfigTest, SnapshotDirNeedsInMemorySnapshots) {
  auto kept = Parse({"--snapshot_dir", "/var/tmp/kept", "/bin/true"});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->agent.snapshot_dir, "/var/tmp/kept");
  EXPECT_EQ(kept->agent.snapshot_dir_every, std::chrono::seconds(60));
  auto at_end_only = Parse({"--snapshot-dir", "/var/tmp/kept", "--snapshot-dir-every", "0", "/bin/true"});
  ASSERT_TRUE(at_end_only.ok()) << at_end_only.status();
  EXPECT_EQ(at_end_only->agent.snapshot_dir_every.count(), 0);
  EXPECT_THAT(Parse({"--snapshot-dir", "/var/tmp/kept", "--snapshot-memory", "0", "/bin/true"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("--snapshot-dir /var/tmp/kept keeps in-memory snapshots, and "
                                            "--snapshot-memory 0 turns them off; drop one of them")));
}

TEST(LaunchConfigTest, AFailureDomainIsANameGivenByFlagOrVariable) {
  EXPECT_EQ(Parse({"--failure-domain", "rack-7", "/bin/true"})->agent.failure_domain, "rack-7");
  EXPECT_EQ(Parse({"/bin/true"})->agent.failure_domain, "");
  setenv("PET_FAILURE_DOMAIN", "leaf-3", 1);  // as a pod spec or a job script would set it
  auto from_env = Parse({"/bin/true"});
  unsetenv("PET_FAILURE_DOMAIN");
  EXPECT_EQ(from_env->agent.failure_domain, "leaf-3");
  EXPECT_THAT(Parse({"--failure_domain", "rack 7", "/bin/true"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("--failure-domain \"rack 7\": expected a name of at most 128 printable "
                                            "characters without spaces, such as the node's rack or leaf switch")));
}

TEST(LaunchConfigTest, RejectsBadValuesWithInvalidArgument) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--nproc-per-node", "0", "/bin/true"},
           {"--nproc-per-node", "many", "/bin/true"},
           {"--nnodes", "3:2", "/bin/true"},
           {"--node-rank", "1", "/bin/true"},
           {"-m", "--no-python", "mod"},
           {"--bogus-flag", "/bin/true"},
           {"--signals-to-handle", "SIGWHAT", "/bin/true"},
           {"--master-port", "70000", "/bin/true"},
           {"--rdzv-conf", "novalue", "/bin/true"},
           {},
           // Values that used to be accepted and then meant something else.
           {"--shutdown-timeout", "inf", "/bin/true"},
           {"--shutdown-timeout", "nan", "/bin/true"},
           {"--shutdown-timeout", "1e300", "/bin/true"},
           {"--standalone", "--nnodes", "2", "/bin/true"},
           {"--rdzv-conf", "join_timeout=nan", "/bin/true"},
           {"--rdzv-conf", "keep_alive_interval=0", "/bin/true"},
           {"--rdzv-conf", "timeout=-1", "/bin/true"},
           {"--rdzv-backend", "etcd", "/bin/true"},
           {"--signals-to-handle", "SIGKILL", "/bin/true"},
           {"--signals-to-handle", "SIGTERM,SIGCHLD", "/bin/true"},
           {"--nnodes", "2", "--master-port", "0", "--master-addr", "127.0.0.1", "--local-addr", "127.0.0.1",
            "/bin/true"},
           {"--nproc-per-node", "100000", "/bin/true"},
           {"--snapshot-dir-every", "-1", "/bin/true"},
           {"--snapshot-dir-every", "nan", "/bin/true"},
           {"--failure-domain", "rack 7", "/bin/true"},
           {"--failure-domain", std::string(129, 'r'), "/bin/true"},
           // `--master-addr $MASTER_ADDR` with the variable unset (found by command_line_fuzz): refused,
           // not waited on for join_timeout as a host that does not resolve yet.
           {"--nnodes", "4", "--node-rank", "1", "--master-addr", "", "/bin/true"},
           {"--nnodes", "2", "--node-rank", "1", "--master-addr", "[]", "/bin/true"},
           {"--master-addr", "", "--master-port", "29500", "/bin/true"},
       }) {
    auto c = Parse(args);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
        << "args: " << (args.empty() ? "(none)" : args[0] + " " + (args.size() > 1 ? args[1] : ""));
  }
}

TEST(LaunchConfigTest, StaticBackendTakesTheEndpointAsMasterAddressAndPort) {
  // PyTorch's DDP example: --nnodes=2 --rdzv_id=101 --rdzv_endpoint=HEAD:5972, backend left static.
  auto c = Parse({"--nnodes=2", "--node-rank=0", "--rdzv_id=101", "--rdzv_endpoint=127.0.0.1:5972", "--local-addr",
                  "127.0.0.1", "/bin/true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->service_host, "127.0.0.1");
  EXPECT_EQ(c->service_port, 5972);
  EXPECT_TRUE(c->hosts_service());
  auto single = Parse({"--rdzv-endpoint", "localhost:6001", "/bin/true"});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->agent.master_addr, "localhost");
  EXPECT_EQ(single->agent.master_port, 6001);
}

// With c10d, --node-rank is where the first round places the node (the service assigns ranks);
// left out, the node asks for no place at all, rather than for place 0 as every other node would.
TEST(LaunchConfigTest, WithAnElasticRendezvousTheNodeRankIsAPreferenceOnlyWhenGiven) {
  for (const auto& [flags, hint] :
       std::vector<std::pair<std::vector<std::string>, int>>{{{"--node-rank", "1"}, 1}, {{}, -1}}) {
    std::vector<std::string> args = {
        "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400", "--local-addr", "127.0.0.1"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("/bin/true");
    auto c = Parse(args);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(c->rdzv.static_ranks);
    EXPECT_EQ(c->agent.rank_hint, hint);
  }
}

TEST(LaunchConfigTest, LocalRankGoesBetweenTheScriptAndItsArguments) {
  std::string script = ::testing::TempDir() + "/legacy.py";
  std::fclose(std::fopen(script.c_str(), "w"));
  auto c = Parse({"--append-local-rank", script, "--cfg", "a.yaml", "opts", "LR", "0.1"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_LT(c->agent.script_args_at, c->agent.argv.size());
  EXPECT_EQ(c->agent.argv[c->agent.script_args_at - 1], script);
  EXPECT_EQ(c->agent.argv[c->agent.script_args_at], "--cfg");
}

TEST(LaunchConfigTest, RedactedCommandLineHidesTheTokenInEverySpelling) {
  EXPECT_EQ(RedactedCommandLine({"--rdzv-token", "s3cret", "--rdzv_token=s3cret", "--rdzv-token=", "train.py", "--",
                                 "--rdzv-token", "prog-arg"}),
            "--rdzv-token *** --rdzv_token=*** --rdzv-token=*** train.py -- --rdzv-token prog-arg");
}

TEST(LaunchConfigTest, NnodesFormats) {
  EXPECT_EQ(*ParseNnodes("2"), std::make_pair(2, 2));
  EXPECT_EQ(*ParseNnodes("1:4"), std::make_pair(1, 4));
  EXPECT_THAT(ParseNnodes("0"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("--nnodes")));
  EXPECT_THAT(ParseNnodes("a:b"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("--nnodes")));
}

TEST(LaunchConfigTest, HelpAndVersionExitCleanly) {
  auto h = ParseCommandLine({"--help"}, Env());
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->config.has_value());
  EXPECT_NE(h->exit_text.find("--nproc-per-node"), std::string::npos);
  auto v = ParseCommandLine({"--version"}, Env());
  ASSERT_TRUE(v.ok());
  // The version, the commit it was built from, and what the trainers were built with.
  EXPECT_TRUE(absl::StartsWith(v->exit_text, absl::StrCat("dtrun ", ThisBuild().version, " (commit ")))
      << v->exit_text;
  EXPECT_THAT(v->exit_text, ::testing::HasSubstr("trainers and worker library: "));  // LibTorch x.y, or not built
  EXPECT_THAT(v->exit_text, ::testing::HasSubstr("compiler:"));
  EXPECT_STRNE(ThisBuild().commit, "");
}

}  // namespace
}  // namespace dtrun

namespace dtrun {
namespace {

TEST(LaunchConfigTest, LocalAddrSelectsItsInterface) {
  auto c = Parse({"--local-addr", "127.0.0.1", "/bin/true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->agent.socket_ifname, "lo");
  EXPECT_EQ(Parse({"--local-addr", "192.0.2.77", "/bin/true"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrun

namespace dtrun {
namespace {

// Parsing asks the host through HostProbe only: a fake host gives fixed answers.
class FakeHost : public HostProbe {
 public:
  AcceleratorInventory inventory;
  CpuTopology topology;
  AcceleratorInventory Accelerators() const override { return inventory; }
  int CpuCount() const override { return 96; }
  CpuTopology Cpus() const override { return topology; }
  absl::StatusOr<std::string> FindExecutable(const std::string& program) const override {
    if (program == "train" || program == "python3") return "/opt/bin/" + program;
    return absl::NotFoundError("program '" + program + "' not found on PATH");
  }
  bool Readable(const std::string& path) const override { return path == "train.py"; }
  std::optional<std::string> InterfaceWithAddress(const std::string& address) const override {
    if (address == "10.1.2.3") return std::string("ib0");
    return std::nullopt;
  }
  std::optional<std::string> LocalAddressFacing(const std::string& host, int) const override {
    if (host == "not-up-yet") return std::nullopt;  // a Kubernetes service before its pod is up
    return "10.1.2.3";
  }
  bool IsThisHost(const std::string& name) const override { return name == "job-worker-0" || name == "10.1.2.3"; }
  std::string ThisExecutable() const override { return "/opt/dtrun/bin/dtrun"; }
  std::string WorkingDirectory() const override { return "/home/me/job"; }
};

absl::StatusOr<LaunchConfig> ParseOn(const FakeHost& host, std::vector<std::string> args) {
  absl::StatusOr<ParsedCommandLine> p = ParseCommandLine(args, {}, host);
  if (!p.ok()) return p.status();
  return *p->config;
}

TEST(LaunchConfigHostTest, WhatTheFlagsMeanComesFromTheHostProbeOnly) {
  FakeHost host;
  host.inventory.nvidia.resize(4);
  auto gpu = ParseOn(host, {"--nproc-per-node", "gpu", "train"});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->agent.nproc_per_node, 4);
  EXPECT_EQ(gpu->agent.executable, "/opt/bin/train");
  EXPECT_EQ(ParseOn(host, {"--nproc-per-node", "cpu", "train"})->agent.nproc_per_node, 96);
  host.inventory.nvidia.clear();
  EXPECT_EQ(ParseOn(host, {"--nproc-per-node", "auto", "train"})->agent.nproc_per_node, 96);
  EXPECT_THAT(ParseOn(host, {"--nproc-per-node", "gpu", "train"}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("--nproc-per-node")));
  auto py = ParseOn(host, {"train.py"});
  ASSERT_TRUE(py.ok()) << py.status();
  EXPECT_EQ(py->agent.executable, "/opt/bin/python3");
  EXPECT_THAT(ParseOn(host, {"missing.py"}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("missing.py")));
  // Multi-node: this node's address and interface are the host's answers.
  auto multi = ParseOn(host, {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29400", "train"});
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_EQ(multi->agent.local_addr, "10.1.2.3");
  EXPECT_EQ(multi->agent.socket_ifname, "ib0");
  EXPECT_FALSE(multi->hosts_service());  // "head" is not one of this host's addresses
}

}  // namespace
}  // namespace dtrun

namespace dtrun {
namespace {

// The token file is read as untrusted: a FIFO does not block, an empty file is an error, and the
// token is its first line without a Windows line end.
TEST(CredentialsTest, TokenFilesAreReadSafely) {
  char tmpl[] = "/tmp/dtrun_credentials_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto write = [&](const std::string& name, const std::string& text) {
    std::FILE* f = std::fopen((dir + "/" + name).c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return dir + "/" + name;
  };
  CredentialFlags flags;
  flags.token_file = write("crlf", "s3cret\r\nsecond line\n");
  absl::StatusOr<Credentials> c = LoadCredentials(flags);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->token, "s3cret");
  EXPECT_FALSE(c->tls.enabled());
  flags.token_file = write("empty", "");
  EXPECT_EQ(LoadCredentials(flags).status().code(), absl::StatusCode::kInvalidArgument);
  flags.token_file = dir + "/fifo";
  ASSERT_EQ(::mkfifo(flags.token_file.c_str(), 0600), 0);
  absl::StatusOr<Credentials> fifo = LoadCredentials(flags);  // returns at once: no writer is waited for
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fifo.status().message().find("--rdzv-token-file"), absl::string_view::npos) << fifo.status();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// `srun -N2 --ntasks-per-node=1 dtrun train` on the second node of a 4-GPU-per-node job: the
// job's values for what the command line leaves out, said in one line; explicit flags win.
// Two NUMA nodes of two single-thread cores; GPUs 0 and 1 on node 0, 2 and 3 on node 1.
void MakeTwoNodeGpuBox(FakeHost& host) {
  for (int id = 0; id < 4; ++id) host.topology.cpus.push_back(Cpu{id, id / 2, id / 2, id, -1});
  host.inventory.nvidia = {{"GPU-a", "0000:1b:00.0", 0},
                           {"GPU-b", "0000:3b:00.0", 0},
                           {"GPU-c", "0000:9b:00.0", 1},
                           {"GPU-d", "0000:bb:00.0", 1}};
}

TEST(LaunchConfigHostTest, NumaBindingGivesEachLocalRankTheCpusOfItsVisibleGpusNode) {
  FakeHost host;
  MakeTwoNodeGpuBox(host);
  auto c = ParseOn(host, {"--nproc-per-node", "gpu", "--numa-binding", "exclusive", "train"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->agent.worker_cpus, ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2), ElementsAre(3)));
  EXPECT_THAT(absl::StrJoin(c->notes, "\n"),
              HasSubstr("--numa-binding exclusive: local rank 2 on CPUs 2 (NUMA node 1, GPU 0000:9b:00.0)"));
  // CUDA_VISIBLE_DEVICES renumbers the GPUs the workers see: local rank 0 uses physical GPU 3.
  absl::StatusOr<ParsedCommandLine> p = ParseCommandLine({"--nproc-per-node", "2", "--numa-binding", "node", "train"},
                                                         {{"CUDA_VISIBLE_DEVICES", "GPU-d,0"}}, host);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->config->agent.worker_cpus, ElementsAre(ElementsAre(2, 3), ElementsAre(0, 1)));
  // torchrun's variable; nothing asked, nothing bound.
  setenv("PET_NUMA_BINDING", "socket", 1);
  p = ParseCommandLine({"--nproc-per-node", "2", "train"}, {}, host);
  unsetenv("PET_NUMA_BINDING");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config->agent.worker_cpus.size(), 2u);
  EXPECT_TRUE(ParseOn(host, {"--nproc-per-node", "2", "train"})->agent.worker_cpus.empty());
}

// ROCm's PyTorch numbers AMD GPUs as "cuda" devices: a local rank follows the HIP-visible GPU it uses.
TEST(LaunchConfigHostTest, NumaBindingOnAnAmdBoxFollowsRocmsVisibleGpus) {
  FakeHost host;
  MakeTwoNodeGpuBox(host);
  host.inventory.amd = host.inventory.nvidia;
  for (PciGpu& gpu : host.inventory.amd) gpu.uuid.clear();
  host.inventory.nvidia.clear();
  absl::StatusOr<ParsedCommandLine> p =
      ParseCommandLine({"--nproc-per-node", "gpu", "--numa-binding", "node", "train"},
                       {{"ROCR_VISIBLE_DEVICES", "3,2,0"}, {"HIP_VISIBLE_DEVICES", "0,2"}}, host);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->config->agent.worker_cpus, ElementsAre(ElementsAre(2, 3), ElementsAre(0, 1)));
  EXPECT_THAT(absl::StrJoin(p->config->notes, "\n"),
              HasSubstr("local rank 0 on CPUs 2-3 (NUMA node 1, GPU 0000:bb:00.0)"));
  EXPECT_THAT(ParseCommandLine({"--nproc-per-node", "1", "--numa-binding", "node", "train"},
                               {{"ROCR_VISIBLE_DEVICES", "GPU-4a5b"}}, host),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("an AMD GPU by UUID); name the GPUs by index")));
}

TEST(LaunchConfigHostTest, NumaBindingThatCannotBeHonouredStopsTheLaunchWithTheReason) {
  FakeHost host;
  MakeTwoNodeGpuBox(host);
  EXPECT_THAT(
      ParseOn(host, {"--nproc-per-node", "2", "--numa-binding", "nodes", "train"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected node, socket, exclusive or core-complex")));
  EXPECT_THAT(ParseOn(host, {"--nproc-per-node", "8", "--numa-binding", "node", "train"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("8 workers but 4 visible GPUs")));
  absl::StatusOr<ParsedCommandLine> mig = ParseCommandLine({"--nproc-per-node", "1", "--numa-binding", "node", "train"},
                                                           {{"CUDA_VISIBLE_DEVICES", "MIG-1234"}}, host);
  EXPECT_THAT(mig, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MIG")));
}

TEST(LaunchConfigHostTest, UnderSlurmTheJobsValuesFillOnlyTheFlagsNotGiven) {
  const std::map<std::string, std::string> slurm = {
      {"SLURM_JOB_ID", "4242"},          {"SLURM_STEP_ID", "0"},          {"SLURM_STEP_NUM_NODES", "2"},
      {"SLURM_STEP_NODELIST", "gpu[07-08]"}, {"SLURM_NODEID", "1"},       {"SLURM_PROCID", "1"},
      {"SLURM_LOCALID", "0"},            {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}, {"SLURM_GPUS_ON_NODE", "4"}};
  FakeHost host;
  absl::StatusOr<ParsedCommandLine> p = ParseCommandLine({"train"}, slurm, host);
  ASSERT_TRUE(p.ok()) << p.status();
  const LaunchConfig& c = *p->config;
  const int port = SlurmJobPort("4242");
  EXPECT_TRUE(c.multi_node());
  EXPECT_EQ(c.agent.node_rank, 1);
  EXPECT_EQ(c.agent.rank_hint, 1);  // with c10d, where the first round places this node
  EXPECT_EQ(c.agent.nproc_per_node, 4);
  EXPECT_EQ(c.agent.run_id, "slurm-4242.0");
  EXPECT_EQ(c.agent.master_addr, "gpu07");
  EXPECT_EQ(c.agent.master_port, port);
  EXPECT_EQ(c.scheduler_note,
            "under Slurm job 4242: --nnodes 2 (SLURM_STEP_NUM_NODES), --node-rank 1 (SLURM_PROCID), --master-addr gpu07 "
            "(the first host of SLURM_STEP_NODELIST), --master-port " + std::to_string(port) +
            " (SLURM_JOB_ID), --rdzv-id slurm-4242.0 (SLURM_JOB_ID.SLURM_STEP_ID), --nproc-per-node 4 "
            "(SLURM_GPUS_ON_NODE), SIGUSR1 and SIGUSR2 forwarded to the workers (Slurm's warnings before preemption)");
  EXPECT_NE(std::find(c.agent.signals_to_handle.begin(), c.agent.signals_to_handle.end(), SIGUSR1),
            c.agent.signals_to_handle.end());
  absl::StatusOr<ParsedCommandLine> mine =
      ParseCommandLine({"--nproc-per-node", "2", "--master-port", "31000", "train"}, slurm, host);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->config->agent.nproc_per_node, 2);
  EXPECT_EQ(mine->config->agent.master_port, 31000);
  EXPECT_EQ(mine->config->scheduler_note.find("--nproc-per-node"), std::string::npos);
  absl::StatusOr<ParsedCommandLine> alone = ParseCommandLine({"--standalone", "train"}, slurm, host);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_FALSE(alone->config->multi_node());
  EXPECT_EQ(alone->config->agent.nproc_per_node, 4);
  std::map<std::string, std::string> crowded = slurm;
  crowded["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  absl::StatusOr<ParsedCommandLine> bad = ParseCommandLine({"train"}, crowded, host);
  EXPECT_NE(bad.status().message().find("under Slurm: srun started 2 dtrun tasks"), std::string::npos) << bad.status();
}

// One topology per way of launching, decided when parsing ends (run_job reads it, never the flags).
TEST(LaunchConfigHostTest, EachWayOfLaunchingHasItsTopology) {
  FakeHost host;
  const std::vector<std::string> c10d = {"--nnodes", "2", "--rdzv-backend", "c10d"};
  auto with = [](std::vector<std::string> a, std::vector<std::string> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  struct Case {
    std::vector<std::string> args;
    Topology expected;
  };
  const std::vector<Case> cases = {
      {{"--standalone", "train"}, Topology::kStandalone},
      {{"train"}, Topology::kSingleNode},
      {{"--master-port", "29511", "train"}, Topology::kSingleNode},
      {{"--nnodes", "2", "--node-rank", "0", "--master-addr", "head", "train"}, Topology::kHostService},
      {{"--nnodes", "2", "--node-rank", "1", "--master-addr", "head", "train"}, Topology::kJoinService},
      {with(c10d, {"--rdzv-endpoint", "job-worker-0:29400", "train"}), Topology::kHostIfFree},
      {with(c10d, {"--rdzv-endpoint", "head:29400", "train"}), Topology::kJoinService},
      {with(c10d, {"--rdzv-endpoint", "head:29400", "--rdzv-conf", "is_host=1", "train"}), Topology::kHostService},
      {with(c10d, {"--rdzv-endpoint", "job-worker-0:29400", "--rdzv-conf", "is_host=0", "train"}),
       Topology::kJoinService},
  };
  for (const Case& c : cases) {
    auto parsed = ParseOn(host, c.args);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << " " << absl::StrJoin(c.args, " ");
    EXPECT_EQ(parsed->topology, c.expected) << absl::StrJoin(c.args, " ");
    EXPECT_FALSE(parsed->agent.launch_id.empty());
  }
}

}  // namespace
}  // namespace dtrun
