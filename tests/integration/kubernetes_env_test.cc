// dtrun in the containers Kubeflow's operators create, with exactly the variables they set and no
// dtrun flags, across network-namespace hosts. The master's name resolves only once its "pod" is
// up: each host's /etc/hosts gains the entry later, as a cluster's DNS starts to answer for a
// headless service.
#include <memory>

#include "gtest/gtest.h"
#include "tests/support/netns_cluster.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;
using Env = std::map<std::string, std::string>;

class KubernetesEnvTest : public NetnsTest {
 protected:
  void SetUp() override {
    NetnsTest::SetUp();
    if (IsSkipped()) return;
    if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
    ASSERT_NO_FATAL_FAILURE(Cluster(2));
  }
  // `dtrun gloo_allreduce.py` in host `i`'s "pod", with the operator's variables only.
  std::unique_ptr<Harness> Pod(int i, Env env) {
    std::vector<std::string> argv = cluster_->Exec(i);
    argv.insert(argv.end(), {DtrunBinary(), Worker("gloo_allreduce.py")});
    env["PYTHON_EXEC"] = *TorchPython();
    return std::make_unique<Harness>(argv, env);
  }
  // Host 0 knows its own name from the start; host 1 learns it after it has started waiting.
  void StartBothOnceTheNameResolves(const std::string& name, Env env0, Env env1) {
    ASSERT_TRUE(cluster_->SetHosts(0, cluster_->address(0) + " " + name + "\n"));
    ASSERT_TRUE(cluster_->SetHosts(1, ""));
    pods_[1] = Pod(1, env1);
    ASSERT_TRUE(pods_[1]->WaitForOutput("does not resolve (or is unreachable) yet")) << pods_[1]->all();
    ASSERT_TRUE(cluster_->AppendHosts(1, cluster_->address(0) + " " + name + "\n"));
    pods_[0] = Pod(0, env0);
  }
  std::unique_ptr<Harness> pods_[2];
};

// Kubeflow Trainer (v2), pkg/runtime/framework/plugins/torch/torch.go, EnforceMLPolicy: PET_NNODES
// (the node count), PET_NPROC_PER_NODE, PET_NODE_RANK (the Job completion index), PET_MASTER_ADDR
// "<trainjob>-node-0-0.<trainjob>" and PET_MASTER_PORT 29400 (constants.ContainerTrainerPort).
TEST_F(KubernetesEnvTest, KubeflowTrainerJobFormsOnceTheMastersNameResolves) {
  auto env = [](int rank) {
    return Env{{"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "1"}, {"PET_NODE_RANK", std::to_string(rank)},
               {"PET_MASTER_ADDR", "tj-node-0-0.tj"}, {"PET_MASTER_PORT", "29400"}};
  };
  StartBothOnceTheNameResolves("tj-node-0-0.tj", env(0), env(1));
  EXPECT_EQ(pods_[0]->Wait(), 0) << pods_[0]->all();
  EXPECT_EQ(pods_[1]->Wait(), 0) << pods_[1]->all();
  EXPECT_NE(pods_[0]->out().find("ALLREDUCE_OK rank=0 world=2"), std::string::npos) << pods_[0]->all();
  EXPECT_NE(pods_[1]->out().find("ALLREDUCE_OK rank=1 world=2"), std::string::npos) << pods_[1]->all();
  EXPECT_NE(pods_[1]->all().find("the rendezvous host tj-node-0-0.tj resolves now"), std::string::npos);
}

// Kubeflow training-operator (v1) PyTorchJob with an elasticPolicy, pkg/controller.v1/pytorch/
// elastic.go: PET_RDZV_ENDPOINT "<job>-worker-0:<port>", PET_RDZV_BACKEND c10d, PET_NNODES "min:max",
// PET_MAX_RESTARTS and PET_N_PROC_PER_NODE (the operator's spelling), and envvar.go's
// PYTHONUNBUFFERED=0. The pod named in the endpoint hosts the rendezvous.
TEST_F(KubernetesEnvTest, TrainingOperatorElasticJobFormsWithTheOperatorsSpelling) {
  const Env env = {{"PET_RDZV_ENDPOINT", "pj-worker-0:23456"}, {"PET_RDZV_BACKEND", "c10d"}, {"PET_NNODES", "2:2"},
                   {"PET_MAX_RESTARTS", "3"}, {"PET_N_PROC_PER_NODE", "2"}, {"PYTHONUNBUFFERED", "0"}};
  StartBothOnceTheNameResolves("pj-worker-0", env, env);
  EXPECT_EQ(pods_[0]->Wait(), 0) << pods_[0]->all();
  EXPECT_EQ(pods_[1]->Wait(), 0) << pods_[1]->all();
  const std::string both = pods_[0]->out() + pods_[1]->out();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(both.find("ALLREDUCE_OK rank=" + std::to_string(rank) + " world=4"), std::string::npos) << both;
  }
}

TEST_F(KubernetesEnvTest, ANameThatNeverResolvesEndsAtTheJoinTimeoutWithTheFix) {
  ASSERT_TRUE(cluster_->SetHosts(1, ""));
  pods_[1] = Pod(1, {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_MASTER_ADDR", "never-up"},
                     {"PET_MASTER_PORT", "29400"}, {"PET_RDZV_CONF", "join_timeout=2"}});
  EXPECT_EQ(pods_[1]->Wait(seconds(30)), 1) << pods_[1]->all();
  EXPECT_NE(pods_[1]->all().find("cannot reach the rendezvous host never-up within join_timeout (2 s)"),
            std::string::npos) << pods_[1]->all();
}

}  // namespace
}  // namespace dtrun::testing
