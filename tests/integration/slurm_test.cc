// dtrun under a real Slurm (slurmctld, slurmd and munge from Debian, on namespace hosts): srun
// starts one dtrun per node and dtrun takes the rest from the job.
#include <memory>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/support/slurm_cluster.h"

namespace dtrun::testing {
namespace {

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = SlurmCluster::Unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
    slurm_ = std::make_unique<SlurmCluster>(2);
    ASSERT_TRUE(slurm_->ok()) << slurm_->error();
  }
  std::pair<int, std::string> Srun(std::vector<std::string> args) {
    std::vector<std::string> argv = slurm_->Exec(0);
    argv.push_back("/usr/bin/srun");
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> env = slurm_->Env();
    env["PYTHON_EXEC"] = *TorchPython();
    return RunToEnd(argv, env);
  }
  std::unique_ptr<SlurmCluster> slurm_;
};

TEST_F(SlurmTest, SrunDtrunFormsAGlooJobAcrossTwoNodesFromTheJobsVariables) {
  auto [rc, out] = Srun({"-N2", "--ntasks-per-node=1", DtrunBinary(), "--nproc-per-node", "2", Worker("gloo_allreduce.py")});
  ASSERT_EQ(rc, 0) << out;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(out.find("ALLREDUCE_OK rank=" + std::to_string(rank) + " world=4"), std::string::npos) << out;
  }
  EXPECT_NE(out.find(": --nnodes 2 (SLURM_STEP_NUM_NODES), --node-rank "), std::string::npos) << out;
  EXPECT_NE(out.find("--master-addr n0 (the first host of SLURM_STEP_NODELIST)"), std::string::npos) << out;
}

TEST_F(SlurmTest, SeveralDtrunTasksOnANodeAreRefusedWithTheFix) {
  auto [rc, out] = Srun({"-N1", "--ntasks-per-node=2", DtrunBinary(), "/bin/true"});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("srun started 2 dtrun tasks on n0"), std::string::npos) << out;
  EXPECT_NE(out.find("srun --ntasks-per-node=1 dtrun"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing
