// What dtrun takes from Slurm's variables (the names and forms Slurm 22.05 sets in a job step;
// the live check is the Slurm test). LaunchConfigHostTest checks that explicit flags win.
#include "launcher/slurm_env.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun {
namespace {

using ::testing::ElementsAre;
using Env = std::map<std::string, std::string>;

// `srun -N2 --ntasks-per-node=1` of `sbatch -N2 --ntasks-per-node=4 --gpus-per-node=4`: node 1.
Env StepOnSecondNode() {
  return {{"SLURM_JOB_ID", "4242"},           {"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_NUM_NODES", "2"},       {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURM_NODEID", "1"},              {"SLURM_PROCID", "1"},
          {"SLURM_LOCALID", "0"},             {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_TASKS_PER_NODE", "4(x2)"},  {"SLURM_GPUS_ON_NODE", "4"},
          {"SLURMD_NODENAME", "gpu08"}};
}

TEST(SlurmEnvTest, AStepOnTheSecondNodeSaysEverythingAJobNeeds) {
  absl::StatusOr<std::optional<SlurmLaunch>> s = ReadSlurmLaunch(StepOnSecondNode());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(s->has_value());
  const SlurmLaunch& l = **s;
  EXPECT_TRUE(l.in_step);
  EXPECT_EQ(l.nnodes, 2);
  EXPECT_EQ(l.node_rank, 1);
  EXPECT_EQ(l.master_addr, "gpu07");
  EXPECT_EQ(l.master_port, SlurmJobPort("4242"));
  EXPECT_EQ(l.run_id, "slurm-4242.0");
  EXPECT_EQ(l.nproc_per_node, 4);
  EXPECT_EQ(l.source.at("--nproc-per-node"), "SLURM_GPUS_ON_NODE");
  EXPECT_EQ(l.source.at("--master-addr"), "the first host of SLURM_STEP_NODELIST");
}

TEST(SlurmEnvTest, WithoutGpusTheJobsTasksOnThisNodeAreTheWorkers) {
  Env env = StepOnSecondNode();
  env.erase("SLURM_GPUS_ON_NODE");
  env["SLURM_TASKS_PER_NODE"] = "8,3";
  EXPECT_EQ((*ReadSlurmLaunch(env))->nproc_per_node, 3);  // node 1's count
}

TEST(SlurmEnvTest, ABatchScriptAloneSpansOneNode) {
  Env env = {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"},
             {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  const SlurmLaunch l = **ReadSlurmLaunch(env);
  EXPECT_FALSE(l.in_step);
  EXPECT_FALSE(l.nnodes.has_value());
  EXPECT_FALSE(l.master_addr.has_value());
  EXPECT_EQ(l.nproc_per_node, 2);
  EXPECT_EQ(l.run_id, "slurm-7");
}

// Under topology/tree Slurm names the switches down to the node's leaf switch, then the node: the
// leaf is the node's failure domain. A node name with dots is more parts after the switches.
TEST(SlurmEnvTest, TheLeafSwitchOfATreeTopologyIsTheFailureDomain) {
  Env env = StepOnSecondNode();
  env["SLURM_TOPOLOGY_ADDR"] = "spine.leaf3.gpu08";
  env["SLURM_TOPOLOGY_ADDR_PATTERN"] = "switch.switch.node";
  SlurmLaunch l = **ReadSlurmLaunch(env);
  EXPECT_EQ(l.failure_domain, "leaf3");
  EXPECT_EQ(l.source.at("--failure-domain"), "the leaf switch in SLURM_TOPOLOGY_ADDR");
  env["SLURM_TOPOLOGY_ADDR"] = "leaf1.gpu08.cluster.example";
  env["SLURM_TOPOLOGY_ADDR_PATTERN"] = "switch.node";
  EXPECT_EQ((*ReadSlurmLaunch(env))->failure_domain, "leaf1");
  // Without a tree (topology/flat sets the node alone), or a form it does not know: nothing.
  for (const auto& [addr, pattern] :
       std::vector<std::pair<std::string, std::string>>{{"gpu08", "node"},
                                                        {"spine.leaf3", "switch.switch.node"},
                                                        {"a.b.gpu08", "switch.block.node"},
                                                        {"spine..gpu08", "switch.switch.node"}}) {
    env["SLURM_TOPOLOGY_ADDR"] = addr;
    env["SLURM_TOPOLOGY_ADDR_PATTERN"] = pattern;
    EXPECT_FALSE((*ReadSlurmLaunch(env))->failure_domain.has_value()) << addr << " " << pattern;
  }
}

TEST(SlurmEnvTest, NotUnderSlurmNothingIsDerived) { EXPECT_FALSE(ReadSlurmLaunch({{"HOME", "/root"}})->has_value()); }

TEST(SlurmEnvTest, SeveralDtrunTasksOnANodeAreExplained) {
  Env env = StepOnSecondNode();
  env["SLURM_STEP_TASKS_PER_NODE"] = "4(x2)";
  absl::Status st = ReadSlurmLaunch(env).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("srun started 4 dtrun tasks on gpu08 (SLURM_STEP_TASKS_PER_NODE=4(x2))"),
            std::string::npos) << st;
  EXPECT_NE(st.message().find("srun --ntasks-per-node=1 dtrun"), std::string::npos) << st;
  env = StepOnSecondNode();
  env["SLURM_LOCALID"] = "2";
  EXPECT_THAT(ReadSlurmLaunch(env), ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                               ::testing::HasSubstr("--ntasks-per-node=1")));
}

TEST(SlurmEnvTest, MalformedVariablesAreNamed) {
  Env env = StepOnSecondNode();
  env["SLURM_STEP_NODELIST"] = "gpu[07-";
  EXPECT_NE(ReadSlurmLaunch(env).status().message().find("SLURM_STEP_NODELIST"), std::string::npos);
  env = StepOnSecondNode();
  env["SLURM_STEP_NUM_NODES"] = "two";
  EXPECT_NE(ReadSlurmLaunch(env).status().message().find("SLURM_STEP_NUM_NODES=two"), std::string::npos);
}

TEST(SlurmEnvTest, CountListsAndPorts) {
  EXPECT_THAT(*ExpandSlurmCounts("4(x2),1"), ElementsAre(4, 4, 1));
  EXPECT_FALSE(ExpandSlurmCounts("4(x2").ok());
  EXPECT_THAT(ExpandSlurmCounts("a"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("Slurm")));
  EXPECT_THAT(ExpandSlurmCounts("1(x99999999)"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("Slurm")));
  EXPECT_NE(SlurmJobPort("1000"), SlurmJobPort("1001"));
  for (const char* id : {"0", "9999", "123456789", "x"}) {
    EXPECT_GE(SlurmJobPort(id), 20000);
    EXPECT_LT(SlurmJobPort(id), 30000);
  }
}

}  // namespace
}  // namespace dtrun
