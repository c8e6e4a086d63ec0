// Multi-node jobs across network-namespace hosts: the real dtrun on each host, the real gRPC
// rendezvous, real PyTorch (Python, Gloo) and LibTorch (C++) workers, and faults.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>

#include "base/host_name.h"
#include "base/process_table.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/file_events.h"
#include "tests/support/netns_cluster.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_probe.h"
#include "tests/support/test_snapshots.h"
#include "tests/support/tls_files.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;


std::string TrainingData() {
  return MakeDemoDataset({"--train-per-class", "24", "--val-per-class", "8", "--size", "64"});
}

class MultiNodeTest : public NetnsTest {
 protected:
  // dtrun on host `i` with static membership (node rank = i unless `rank` says otherwise). A
  // node's lease is 2 s (0.5 s keep-alives, 4 missed): 0.6 s declared live nodes lost when the
  // machine was loaded (an ASan build beside the plain suite).
  std::unique_ptr<Harness> Node(int i, std::vector<std::string> launch, std::vector<std::string> program,
                                std::map<std::string, std::string> env = {}, int nnodes = 2, int rank = -1,
                                const std::string& token = "tok") {
    std::vector<std::string> argv = cluster_->Exec(i);
    std::vector<std::string> base = {DtrunBinary(),
                                     "--nnodes",
                                     std::to_string(nnodes),
                                     "--node-rank",
                                     std::to_string(rank < 0 ? i : rank),
                                     "--master-addr",
                                     cluster_->address(0),
                                     "--master-port",
                                     "29511",
                                     "--rdzv-id",
                                     "mn",
                                     "--local-addr",
                                     cluster_->address(i),
                                     "--rdzv-token",
                                     token,
                                     "--rdzv-conf",
                                     rdzv_conf_};
    argv.insert(argv.end(), base.begin(), base.end());
    argv.insert(argv.end(), launch.begin(), launch.end());
    argv.insert(argv.end(), program.begin(), program.end());
    env.emplace("PYTHON_EXEC", TorchPython().value_or("/usr/bin/python3"));
    return std::make_unique<Harness>(argv, env);
  }
  std::string rdzv_conf_ = "keep_alive_interval=0.5,keep_alive_max_attempt=4,join_timeout=20";
  // Nodes 0 and 1 of a static job of idle workers, then node 1's dtrun SIGKILLed and reaped (as a
  // supervisor does before it restarts it). Returns node 0, still running; null after a failure.
  std::unique_ptr<Harness> RunTwoThenKillNode1() {
    auto n0 = Node(0, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
    auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
    if (!n0->WaitForOutput("READY 0") || !n1->WaitForOutput("READY 1")) {
      ADD_FAILURE() << "node 0:\n" << n0->all() << "\nnode 1:\n" << n1->all();
      return nullptr;
    }
    ::kill(n1->pid(), SIGKILL);
    if (!n1->Wait(std::chrono::seconds(10)).has_value()) ADD_FAILURE() << "node 1's dtrun outlived SIGKILL";
    return n0;
  }
  // SIGTERM to node 0 and to the node that took rank 1; both end.
  static void StopBoth(Harness& n0, Harness& n1) {
    ::kill(n0.pid(), SIGTERM);
    ::kill(n1.pid(), SIGTERM);
    EXPECT_EQ(n0.Wait(), 128 + SIGTERM) << n0.all();
    EXPECT_TRUE(n1.Wait().has_value()) << n1.all();
  }
  // dtrun on host `i` in an elastic job of 2 nodes of one worker each (a third host is a spare),
  // whose rendezvous host 0 serves on `port`; quick keep-alives (a lost node is noticed in 0.6 s)
  // unless `conf` says otherwise.
  std::unique_ptr<Harness> ElasticNode(int i, int port, const std::string& id, std::vector<std::string> rest,
                                       const std::string& conf = "keep_alive_interval=0.2,keep_alive_max_attempt=3",
                                       std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = cluster_->Exec(i);
    std::vector<std::string> base = {DtrunBinary(),
                                     "--nnodes",
                                     "2:2",
                                     "--nproc-per-node",
                                     "1",
                                     "--rdzv-backend",
                                     "c10d",
                                     "--rdzv-endpoint",
                                     cluster_->address(0) + ":" + std::to_string(port),
                                     "--rdzv-id",
                                     id,
                                     "--local-addr",
                                     cluster_->address(i),
                                     "--rdzv-conf",
                                     conf};
    argv.insert(argv.end(), base.begin(), base.end());
    argv.insert(argv.end(), rest.begin(), rest.end());
    return std::make_unique<Harness>(argv, env);
  }
  // train_imagenet on hosts 0 and 1, one worker each, each with its own output dir DIR/host<i>
  // (no shared filesystem): 240 images / 2 ranks / 16 = 8 steps per epoch, a checkpoint every step.
  std::vector<std::unique_ptr<Harness>> TrainOnBothHosts(const std::string& data, const std::string& dir, int epochs,
                                                         std::vector<std::string> launch = {},
                                                         std::vector<std::string> train = {}) {
    launch.insert(launch.begin(), {"--nproc-per-node", "1"});
    std::vector<std::unique_ptr<Harness>> nodes;
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> program = {BinDir() + "/train_imagenet", data, "-b", "16", "--lr", "0.02",
                                          "--image-size", "64", "-j", "1", "--epochs", std::to_string(epochs),
                                          "-p", "1", "--save-every-minutes", "0",
                                          "--output-dir", dir + "/host" + std::to_string(i)};
      program.insert(program.end(), train.begin(), train.end());
      nodes.push_back(Node(i, launch, program));
    }
    return nodes;
  }
  // train_imagenet in an elastic job on hosts 0 and 1 (one worker each, TLS, snapshots every 3
  // steps and only the first travelling to the buddy, so the step of the buddy copy is known: 3).
  // Not every step: the agent pins a snapshot while its worker's two slots still hold it, and
  // under CI's load two more snapshots a step apart once overwrote the first before it was pinned,
  // so that nothing ever travelled. Once
  // host 1's first copy is on host 0 and `dtrun status` shows it and every rank's snapshot of
  // `min_step` or later, host 1 is SIGKILLed and the spare on host 2 takes its rank (0 or 1: ranks
  // come in join order). The outputs of host 0 and the spare, both run to the end.
  struct LostNodeRun {
    std::string survivor, spare;
  };
  LostNodeRun LoseANodeToTheSpare(int64_t min_step, std::map<std::string, std::string> env) {
    const std::string data = TrainingData(), dir = MakeTempDir();
    const std::vector<std::string> tls = MakeTlsFiles(dir, "job", "IP:" + cluster_->address(0)).Flags();
    if (tls.empty()) {
      ADD_FAILURE() << "openssl is not installed (or could not make test certificates)";
      return {};
    }
    const std::string endpoint = cluster_->address(0) + ":29514";
    auto elastic = [&](int i) {
      std::vector<std::string> argv = cluster_->Exec(i);
      argv.push_back(DtrunBinary());
      argv.insert(argv.end(), tls.begin(), tls.end());
      std::vector<std::string> rest = {
          "--nnodes", "2:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
          endpoint, "--rdzv-id", "buddy", "--local-addr", cluster_->address(i),
          "--rdzv-token", "tok", "--rdzv-conf", "keep_alive_interval=0.5,keep_alive_max_attempt=4,join_timeout=60",
          "--max-restarts", "2", "--snapshot-every", "3", "--snapshot-buddy-every", "100000",
          BinDir() + "/train_imagenet", data, "-b", "16", "--lr", "0.02", "--image-size", "64", "-j", "1",
          "--epochs", "6", "-p", "1", "--save-every-minutes", "1000", "--output-dir", dir + "/host" + std::to_string(i)};
      argv.insert(argv.end(), rest.begin(), rest.end());
      return std::make_unique<Harness>(argv, env);
    };
    auto a = elastic(0);
    auto b = elastic(1);
    if (!b->WaitForOutput("holds a copy of its snapshot of step", seconds(180))) {
      // Once in CI (run beside a test like this one) host 1's dtrun ended early saying nothing:
      // its exit status tells a signal from an exit.
      const std::optional<int> ended = b->Wait(std::chrono::milliseconds(0));
      ADD_FAILURE() << "host 1 (exit status " << (ended ? std::to_string(*ended) : "none: still running")
                    << "):\n" << b->all() << "\nhost 0:\n" << a->all();
      return {};
    }
    auto ask = [&] {
      std::vector<std::string> argv = cluster_->Exec(2);
      argv.insert(argv.end(), {DtrunBinary(), "status", "--json", "--endpoint", endpoint, "--run-id", "buddy",
                               "--rdzv-token", "tok"});
      argv.insert(argv.end(), tls.begin(), tls.end());
      return ParseJsonLines(RunToEnd(argv).second);
    };
    // Both nodes name their buddy; the copy that host 1 said its buddy holds is shown.
    const nlohmann::json status = AwaitStatus(ask, [min_step](const nlohmann::json& job) {
      int with_buddy = 0, copies = 0, snapshotted = 0;
      for (const nlohmann::json& node : job.value("nodes", nlohmann::json::array())) {
        with_buddy += node.value("buddy", nlohmann::json()).is_string();
        for (const nlohmann::json& r : node.value("ranks", nlohmann::json::array())) {
          copies += r.value("buddy_step", nlohmann::json()).is_number() && r["buddy_step"] >= 1;
          snapshotted += r.value("snapshot_step", nlohmann::json()).is_number() && r["snapshot_step"] >= min_step;
        }
      }
      return with_buddy == 2 && copies >= 1 && snapshotted == 2;
    });
    EXPECT_EQ(status["nodes"].size(), 2u) << status.dump();
    // Each node keeps its buddy's copies on the declared port's number, the rendezvous host through
    // the port itself: a firewall that opens only that port lets them through.
    std::set<std::string> buddies;
    for (const nlohmann::json& node : status.value("nodes", nlohmann::json::array())) {
      buddies.insert(node.value("buddy", ""));
    }
    EXPECT_EQ(buddies, (std::set<std::string>{cluster_->address(0) + ":29514", cluster_->address(1) + ":29514"}))
        << status.dump();
    auto spare = elastic(2);
    EXPECT_TRUE(spare->WaitForOutput("spare", seconds(60))) << spare->all();
    ::kill(b->pid(), SIGKILL);
    EXPECT_EQ(a->Wait(seconds(300)), 0) << a->all();
    EXPECT_EQ(spare->Wait(seconds(60)), 0) << spare->all();
    return {a->all(), spare->all()};
  }
};

TEST_F(MultiNodeTest, PythonGlooJobAcrossTwoHostsWithUnevenWorkerCounts) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  auto n0 = Node(0, {"--nproc-per-node", "2"}, {Worker("gloo_allreduce.py")});
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("gloo_allreduce.py")});
  EXPECT_EQ(n0->Wait(), 0) << n0->all();
  EXPECT_EQ(n1->Wait(), 0) << n1->all();
  EXPECT_NE(n0->out().find("ALLREDUCE_OK rank=1 world=3 sum=6"), std::string::npos) << n0->all();
  EXPECT_NE(n1->out().find("ALLREDUCE_OK rank=2 world=3 sum=6"), std::string::npos) << n1->all();
}

TEST_F(MultiNodeTest, OnlyTheDeclaredPortIsNeededBetweenHostsAndWorkersSeeIt) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  for (int host : {0, 1}) {
    if (!cluster_->AllowOnlyTcpPort(host, 29511)) GTEST_SKIP() << "nftables (nft) is not available";
  }
  // The rendezvous (gRPC) and the workers' TCPStore share --master-port on node 0.
  auto n0 = Node(0, {"--nproc-per-node", "1"}, {Worker("store_exchange.py")});
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("store_exchange.py")});
  EXPECT_EQ(n0->Wait(std::chrono::seconds(60)), 0) << n0->all();
  EXPECT_EQ(n1->Wait(std::chrono::seconds(60)), 0) << n1->all();
  const std::string master = cluster_->address(0) + ":29511";
  EXPECT_NE(n0->out().find("STORE_OK rank=0 master=" + master), std::string::npos) << n0->all();
  EXPECT_NE(n1->out().find("STORE_OK rank=1 master=" + master), std::string::npos) << n1->all();
}

// The same with a dedicated `dtrun rdzv-server` on host 0 and the job's nodes on hosts 1 and 2:
// the server serves the workers' store on its endpoint too, so the one port is still all that a
// firewall on every host must open. (It was group rank 0's agent's store, on a port of the
// kernel's that the firewall closed.)
TEST_F(MultiNodeTest, ADedicatedServiceServesTheWorkersStoreOnItsOwnPort) {
  Cluster(3);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  for (int host : {0, 1, 2}) {
    if (!cluster_->AllowOnlyTcpPort(host, 29511)) GTEST_SKIP() << "nftables (nft) is not available";
  }
  const std::string endpoint = cluster_->address(0) + ":29511";
  std::vector<std::string> serve = cluster_->Exec(0);
  serve.insert(serve.end(), {DtrunBinary(), "rdzv-server", "--rdzv-endpoint", endpoint, "--nnodes", "2", "--rdzv-id",
                             "ded", "--rdzv-token", "tok"});
  Harness server(serve);
  ASSERT_TRUE(server.WaitForOutput("serving run ded on " + endpoint)) << server.all();
  auto node = [&](int i) {
    return ElasticNode(i, 29511, "ded", {"--rdzv-token", "tok", Worker("store_exchange.py")}, rdzv_conf_);
  };
  auto n1 = node(1), n2 = node(2);
  EXPECT_EQ(n1->Wait(seconds(60)), 0) << n1->all() << server.all();
  EXPECT_EQ(n2->Wait(seconds(60)), 0) << n2->all() << server.all();
  const std::string both = n1->out() + n2->out();  // which node is group rank 0 is the service's choice
  EXPECT_NE(both.find("STORE_OK rank=0 master=" + endpoint), std::string::npos) << n1->all() << n2->all();
  EXPECT_NE(both.find("STORE_OK rank=1 master=" + endpoint), std::string::npos) << n1->all() << n2->all();
  EXPECT_EQ(server.Wait(seconds(30)), 0) << server.all();  // the job is over and both nodes left
}

TEST_F(MultiNodeTest, CppLibTorchJobAcrossThreeHosts) {
  Cluster(3);
  std::string bin = BinDir() + "/allreduce_check";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << "built without LibTorch";
  std::vector<std::unique_ptr<Harness>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(Node(i, {"--nproc-per-node", "1"}, {bin}, {}, 3));
  for (auto& n : nodes) EXPECT_EQ(n->Wait(), 0) << n->all();
  EXPECT_NE(nodes[2]->out().find("ALLREDUCE_OK rank=2 world=3 sum=6"), std::string::npos) << nodes[2]->all();
}

// Only host 0's dir gets checkpoints. After a worker is killed, both ranks resume from rank 0's
// checkpoint (sent through the process group) and the job ends with exactly the planned optimizer
// steps. Before, rank 1 started from step 0, the collectives mismatched and the job hung until
// the collective timeout. In-memory snapshots are off: they would be restored first, and this test
// is about the disk path (RecoveryTest covers the snapshots).
TEST_F(MultiNodeTest, ResumeIsTheSameOnHostsWithSeparateOutputDirs) {
  Cluster(2);
  if (!std::filesystem::exists(BinDir() + "/train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string data = TrainingData(), dir = MakeTempDir();
  std::vector<std::unique_ptr<Harness>> nodes =
      TrainOnBothHosts(data, dir, 2, {"--max-restarts", "1", "--snapshot-memory", "0"});
  ASSERT_TRUE(nodes[0]->WaitForOutput("Epoch: [1][3/8]", std::chrono::seconds(180))) << nodes[0]->all();
  const pid_t victim = WorkerOf(nodes[1]->pid(), 1);  // the running worker, not a parked one
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGKILL);
  EXPECT_EQ(nodes[0]->Wait(std::chrono::seconds(240)), 0) << nodes[0]->all();
  EXPECT_EQ(nodes[1]->Wait(std::chrono::seconds(60)), 0) << nodes[1]->all();
  EXPECT_NE(nodes[0]->all().find("resuming from"), std::string::npos) << nodes[0]->all();
  EXPECT_NE(nodes[1]->all().find("resuming from rank 0's checkpoint"), std::string::npos) << nodes[1]->all();
  EXPECT_NE(nodes[0]->all().find("16 optimizer steps"), std::string::npos) << nodes[0]->all();
}

// Host 0's newest checkpoint is torn and host 1 holds an unrelated older one of its own: rank 0
// falls back to its newest good file and rank 1 follows it, not its own.
TEST_F(MultiNodeTest, ResumeFollowsRankZerosFallbackPastACorruptNewestFile) {
  Cluster(2);
  if (!std::filesystem::exists(BinDir() + "/train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string data = TrainingData(), dir = MakeTempDir();
  const std::string out0 = dir + "/host0", out1 = dir + "/host1";
  {  // one epoch: host 0 ends with checkpoints up to step 8
    auto first = TrainOnBothHosts(data, dir, 1);
    ASSERT_EQ(first[0]->Wait(std::chrono::seconds(240)), 0) << first[0]->all();
    ASSERT_EQ(first[1]->Wait(std::chrono::seconds(60)), 0) << first[1]->all();
  }
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(out0 + "/checkpoints")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 2u);
  std::filesystem::resize_file(files.back(), std::filesystem::file_size(files.back()) / 2);  // torn newest
  std::filesystem::create_directories(out1 + "/checkpoints");
  std::filesystem::copy_file(files.front(), out1 + "/checkpoints/" + files.back().filename().string());
  auto nodes = TrainOnBothHosts(data, dir, 2);
  EXPECT_EQ(nodes[0]->Wait(std::chrono::seconds(240)), 0) << nodes[0]->all();
  EXPECT_EQ(nodes[1]->Wait(std::chrono::seconds(60)), 0) << nodes[1]->all();
  EXPECT_NE(nodes[0]->all().find("is unreadable"), std::string::npos) << nodes[0]->all();
  EXPECT_NE(nodes[1]->all().find("resuming from rank 0's checkpoint"), std::string::npos) << nodes[1]->all();
  EXPECT_NE(nodes[0]->all().find("16 optimizer steps"), std::string::npos) << nodes[0]->all();
}

// --checkpoint-every-node: host 1's own disk gets the same checkpoints as host 0's.
TEST_F(MultiNodeTest, CheckpointsCanBeWrittenOnEveryNodesOwnDisk) {
  Cluster(2);
  if (!std::filesystem::exists(BinDir() + "/train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string data = TrainingData(), dir = MakeTempDir();
  std::vector<std::unique_ptr<Harness>> nodes = TrainOnBothHosts(data, dir, 1, {}, {"--checkpoint-every-node"});
  for (auto& n : nodes) ASSERT_EQ(n->Wait(std::chrono::seconds(240)), 0) << n->all();
  auto names = [](const std::string& d) {
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(d)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<std::string> host0 = names(dir + "/host0/checkpoints"), host1 = names(dir + "/host1/checkpoints");
  EXPECT_FALSE(host0.empty());
  EXPECT_EQ(host0, host1);
}

TEST_F(MultiNodeTest, WorkerFailureOnOneHostRestartsEveryHost) {
  Cluster(2);
  // Global rank 1 (on host 1) fails in round 0; round 1 succeeds everywhere.
  std::map<std::string, std::string> env = {{"SUCCEED_AT", "1"}};
  auto n0 = Node(0, {"--nproc-per-node", "1", "--max-restarts", "2"}, {Worker("fail_once.sh")}, env);
  auto n1 = Node(1, {"--nproc-per-node", "1", "--max-restarts", "2"}, {Worker("fail_once.sh")}, env);
  EXPECT_EQ(n0->Wait(), 0) << n0->all();
  EXPECT_EQ(n1->Wait(), 0) << n1->all();
  EXPECT_NE(n0->out().find("attempt 1 rank 0"), std::string::npos) << n0->all();  // the healthy host restarted
  EXPECT_NE(n0->err().find("round 1: worker rank 1 on "), std::string::npos) << n0->all();
}

// Global rank 1 (host 1) blocks before its all_reduce; rank 0 (host 0) waits in it. Only host 1
// has a short heartbeat timeout, so host 0 takes its worker's stacks because the job says a hang
// ended the round, before stopping it. Each host keeps its own log dir.
TEST_F(MultiNodeTest, AHangOnOneHostGetsEveryHostsStacksBeforeTheRestart) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  const std::string dir = MakeTempDir();
  std::map<std::string, std::string> env = {{"HANG_RANK", "1"}};
  auto n0 = Node(0, {"--nproc-per-node", "1", "--max-restarts", "1", "--heartbeat-timeout", "60", "--log-dir",
                     dir + "/host0"}, {Worker("hang_in_step.py")}, env);
  auto n1 = Node(1, {"--nproc-per-node", "1", "--max-restarts", "1", "--heartbeat-timeout", "2", "--log-dir",
                     dir + "/host1"}, {Worker("hang_in_step.py")}, env);
  EXPECT_EQ(n0->Wait(), 0) << n0->all();
  EXPECT_EQ(n1->Wait(), 0) << n1->all();
  EXPECT_NE(n0->err().find("round 1: worker rank 1 on "), std::string::npos) << n0->all();
  EXPECT_NE(n0->err().find(" hung (no progress report for"), std::string::npos) << n0->all();
  auto stacks = [&](int host) { return ReadText(dir + "/host" + std::to_string(host) + "/mn/attempt_0/0/stacks.txt"); };
  EXPECT_NE(stacks(0).find("in all_reduce"), std::string::npos) << stacks(0) << n0->all();
  EXPECT_NE(stacks(1).find("in block_forever"), std::string::npos) << stacks(1) << n1->all();
  EXPECT_NE(n0->out().find("rank 0 finished attempt 1"), std::string::npos) << n0->all();
}

// Both hosts time out together; host 0's only rank waits in the all_reduce, so host 0 holds its
// report back and host 1, whose rank is elsewhere, names the culprit for the job.
TEST_F(MultiNodeTest, WhenEveryHostTimesOutTheHostWithTheCulpritNamesIt) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
  std::map<std::string, std::string> env = {{"HANG_RANK", "1"}};
  auto n0 = Node(0, {"--nproc-per-node", "1", "--max-restarts", "1", "--heartbeat-timeout", "2"},
                 {Worker("hang_in_step.py")}, env);
  auto n1 = Node(1, {"--nproc-per-node", "1", "--max-restarts", "1", "--heartbeat-timeout", "2"},
                 {Worker("hang_in_step.py")}, env);
  EXPECT_EQ(n0->Wait(), 0) << n0->all();
  EXPECT_EQ(n1->Wait(), 0) << n1->all();
  for (auto* n : {n0.get(), n1.get()}) {
    EXPECT_NE(n->err().find("round 1: worker rank 1 on "), std::string::npos) << n->all();
  }
  EXPECT_NE(n0->err().find("holding the hang report"), std::string::npos) << n0->all();
}

// `dtrun status` on either host shows every rank of both, from the rows each agent pushes to the
// rendezvous with its keep-alives; `--endpoint` shows the same from anywhere; without the job's
// token a host still shows its own rows and says why the others are missing.
TEST_F(MultiNodeTest, StatusOnAnyHostShowsEveryRankOfBothHostsWithAdvancingSteps) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python for the workers";
  std::map<std::string, std::string> env[2] = {{{"DTRUN_RUNTIME_DIR", MakeTempDir()}},
                                               {{"DTRUN_RUNTIME_DIR", MakeTempDir()}}};
  auto n0 = Node(0, {"--nproc-per-node", "2"}, {Worker("report_steps.py")}, env[0]);
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("report_steps.py")}, env[1]);
  ASSERT_TRUE(n0->WaitForOutput("STEPPING 1")) << n0->all();
  ASSERT_TRUE(n1->WaitForOutput("STEPPING 2")) << n1->all();
  auto status = [&](int host, std::vector<std::string> extra) {
    std::vector<std::string> argv = cluster_->Exec(host);
    argv.insert(argv.end(), {DtrunBinary(), "status"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunToEnd(argv, env[host]);
  };
  for (int host : {1, 0}) {
    auto ask = [&] { return ParseJsonLines(status(host, {"--json", "--rdzv-token", "tok"}).second); };
    nlohmann::json first = AwaitStepsPast(ask, {}, 3);
    nlohmann::json later = AwaitStepsPast(ask, StepsByRank(first), 3);
    std::map<int, int64_t> before = StepsByRank(first), after = StepsByRank(later);
    ASSERT_EQ(after.size(), 3u) << "host " << host << ": " << later.dump();
    for (int rank : {0, 1, 2}) EXPECT_GT(after[rank], before[rank]) << "host " << host << ": " << later.dump();
    EXPECT_EQ(later["nodes"].size(), 2u) << later.dump();
    EXPECT_EQ(later["phase"], "running") << later.dump();
  }
  const std::string endpoint = cluster_->address(0) + ":29511";
  std::vector<nlohmann::json> remote =
      ParseJsonLines(status(1, {"--json", "--endpoint", endpoint, "--run-id", "mn", "--rdzv-token", "tok"}).second);
  ASSERT_EQ(remote.size(), 1u);
  EXPECT_EQ(StepsByRank(remote[0]).size(), 3u) << remote[0].dump();
  auto [rc, table] = status(1, {});
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("(this node only: the rendezvous at " + endpoint + " did not answer"), std::string::npos) << table;
  EXPECT_NE(table.find(" 2     0 "), std::string::npos) << table;  // its own rank 2 (local 0) is shown
  std::vector<std::string> kill = cluster_->Exec(0);
  kill.insert(kill.end(), {DtrunBinary(), "kill", "--endpoint", endpoint, "--run-id", "mn", "--rdzv-token", "tok"});
  EXPECT_EQ(RunToEnd(kill).first, 0);
  EXPECT_TRUE(n0->Wait(seconds(30)).has_value()) << n0->all();
  EXPECT_TRUE(n1->Wait(seconds(30)).has_value()) << n1->all();
}

TEST_F(MultiNodeTest, SpentBudgetEndsEveryHostWithTheSameRootCause) {
  Cluster(2);
  std::map<std::string, std::string> env = {{"SUCCEED_AT", "9"}, {"CODE", "7"}};
  auto n0 = Node(0, {"--nproc-per-node", "1", "--max-restarts", "1"}, {Worker("fail_once.sh")}, env);
  auto n1 = Node(1, {"--nproc-per-node", "1", "--max-restarts", "1"}, {Worker("fail_once.sh")}, env);
  EXPECT_EQ(n0->Wait(), 7) << n0->all();
  EXPECT_EQ(n1->Wait(), 7) << n1->all();
  for (auto* n : {n0.get(), n1.get()}) {
    EXPECT_NE(n->err().find("Root Cause (first observed failure)"), std::string::npos) << n->all();
    EXPECT_NE(n->err().find("rank      : 1 (local_rank: 0)"), std::string::npos) << n->all();
    EXPECT_NE(n->err().find("exitcode  : 7"), std::string::npos) << n->all();
  }
}

TEST_F(MultiNodeTest, AnUncaughtExceptionOnOneHostIsInEveryHostsSummary) {
  Cluster(2);
  std::map<std::string, std::string> env = {{"PYTHON_EXEC", "/usr/bin/python3"}};
  auto n0 = Node(0, {"--nproc-per-node", "1"}, {Worker("uncaught.py"), "raise"}, env);
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("uncaught.py"), "raise"}, env);  // rank 1 raises
  EXPECT_EQ(n0->Wait(), 1) << n0->all();
  EXPECT_EQ(n1->Wait(), 1) << n1->all();
  for (auto* n : {n0.get(), n1.get()}) {
    const std::string err = n->err();
    const std::string root = err.substr(std::min(err.size(), err.find("Root Cause")));
    EXPECT_NE(root.find("rank      : 1 (local_rank: 0)"), std::string::npos) << n->all();
    EXPECT_NE(root.find("traceback : Traceback (most recent call last):"), std::string::npos) << n->all();
    EXPECT_NE(root.find("ValueError: bad batch 7"), std::string::npos) << n->all();
  }
}

TEST_F(MultiNodeTest, SigkilledAgentIsDetectedAndTheSurvivorStopsItsWorkers) {
  Cluster(2);
  auto n0 = Node(0, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(n0->WaitForOutput("READY 0"));
  ASSERT_TRUE(n1->WaitForOutput("READY 1"));
  ::kill(n1->pid(), SIGKILL);
  ASSERT_TRUE(n0->WaitForOutput("lost: no keep-alive", std::chrono::seconds(10))) << n0->all();
  // Named by rank and address (containers often share a hostname), with what happens next.
  const std::string node1 = "node 1 (" + LocalHostName() + ", " + cluster_->address(1) + ")";
  EXPECT_NE(n0->err().find(node1 + " lost: no keep-alive"), std::string::npos) << n0->all();
  EXPECT_NE(n0->err().find("waiting for " + node1 + " to come back, up to 20 s (join_timeout); Ctrl-C to stop"),
            std::string::npos) << n0->all();
  // Static membership: the survivor waits for the node to come back; it does, and a new round runs.
  auto back = Node(1, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(back->WaitForOutput("READY 1")) << back->all();
  ::kill(n0->pid(), SIGTERM);
  ::kill(back->pid(), SIGTERM);
  EXPECT_EQ(n0->Wait(), 128 + SIGTERM) << n0->all();
  EXPECT_TRUE(back->Wait().has_value());
}

// A node's dtrun SIGKILLed and started again at once, as a supervisor restarts it (systemd, a
// Kubernetes container restart): the new agent takes the rank over from its dead predecessor, and a
// new round runs without waiting out that agent's lease (60 s here, longer than the bound below).
// Before, the rank stayed taken for the whole lease and the restarted node was refused ("node rank
// 1 has already joined ... give every node its own --node-rank") and exited.
TEST_F(MultiNodeTest, ANodeStartedAgainRightAfterItsAgentDiedTakesItsRankWithoutWaitingOutTheLease) {
  Cluster(2);
  rdzv_conf_ = "keep_alive_interval=2,keep_alive_max_attempt=30,join_timeout=60";
  auto n0 = RunTwoThenKillNode1();
  ASSERT_TRUE(n0);
  auto back = Node(1, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(back->WaitForOutput("READY 1", seconds(50))) << back->all() << "\nnode 0:\n" << n0->all();
  const std::string node1 = "node 1 (" + LocalHostName() + ", " + cluster_->address(1) + ")";
  EXPECT_TRUE(n0->WaitForOutput(node1 + " was started again: its earlier agent is gone", seconds(10))) << n0->all();
  EXPECT_EQ(n0->err().find("lost: no keep-alive"), std::string::npos) << n0->all();
  // A second dtrun for rank 1 on that machine while the first lives is still a duplicate.
  auto dup = Node(1, {"--nproc-per-node", "1"}, {"/bin/true"});
  EXPECT_EQ(dup->Wait(seconds(60)), 1) << dup->all();
  EXPECT_NE(dup->err().find("node rank 1 has already joined"), std::string::npos) << dup->all();
  StopBoth(*n0, *back);
}

// Node 1's dtrun SIGKILLed and node rank 1 started on another machine (a rescheduled pod, a spare
// host): nothing there knows whether the first agent is dead, so the new one waits for that agent's
// lease (10 s here) and then takes the rank, saying so. It used to be refused as a duplicate rank
// and exit ("node rank 1 has already joined ... give every node its own --node-rank").
TEST_F(MultiNodeTest, ANodeStartedOnAnotherMachineTakesTheRankWhenTheDeadAgentsLeaseRunsOut) {
  Cluster(3);
  rdzv_conf_ = "keep_alive_interval=1,keep_alive_max_attempt=10,join_timeout=60";
  auto n0 = RunTwoThenKillNode1();
  ASSERT_TRUE(n0);
  auto moved = Node(2, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")}, {}, 2, /*rank=*/1);
  ASSERT_TRUE(moved->WaitForOutput("READY 1", seconds(50))) << moved->all() << "\nnode 0:\n" << n0->all();
  const std::string node1 = "node 1 (" + LocalHostName() + ", " + cluster_->address(1) + ")";
  EXPECT_NE(moved->err().find("node rank 1 is held by " + node1 + ", silent for "), std::string::npos) << moved->all();
  EXPECT_TRUE(n0->WaitForOutput(node1 + " lost: no keep-alive", seconds(10))) << n0->all();
  StopBoth(*n0, *moved);
}

// The dtrun that hosts the rendezvous (node 0) SIGKILLed and started again at once, as a supervisor
// restarts it: the other node's keep-alives find a new service at the same address within their
// lease (10 s here), it joins that one, and the job goes on from the newest in-memory snapshot
// (node 1's own; node 0's new rank takes its buddy copy, or rank 1's state). The new service
// numbers its round above the one node 1 ran (1, not 0 again). Before, node 1 joined a round 0 of
// the new service and took it for the one its workers already ran: it kept them, their failure
// (their peer was gone) was charged to the new round, and with no restarts left both nodes exited 1.
TEST_F(MultiNodeTest, TheServiceHostsDtrunStartedAgainTakesTheJobBackFromTheInMemorySnapshots) {
  Cluster(2);
  const std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  rdzv_conf_ = "keep_alive_interval=0.5,keep_alive_max_attempt=20,join_timeout=60";
  auto node = [&](int i) {
    return Node(i, {"--nproc-per-node", "1", "--snapshot-every", "10"},
                {Worker("snapshot_resume.py"), "150", "--first-attempt-runs-on", "--say-every", "10"});
  };
  auto a = node(0);
  auto b = node(1);
  ASSERT_TRUE(a->WaitForOutput("STEP 100", seconds(120))) << a->all() << "\nnode 1:\n" << b->all();
  ::kill(a->pid(), SIGKILL);
  ASSERT_TRUE(a->Wait(seconds(10)).has_value());
  auto again = node(0);
  EXPECT_EQ(again->Wait(seconds(120)), 0) << again->all() << "\nnode 1:\n" << b->all();
  EXPECT_EQ(b->Wait(seconds(60)), 0) << b->all();
  const std::string a_out = again->all(), b_out = b->all();
  EXPECT_NE(b_out.find("does not know this node (it declared it lost, or it was started again); joining again"),
            std::string::npos)
      << b_out;
  EXPECT_EQ(b_out.find("lost the rendezvous service"), std::string::npos) << b_out;
  std::smatch on_a, on_b, digest_a, digest_b;
  ASSERT_TRUE(std::regex_search(b_out, on_b, std::regex(R"(RESTORED step=(\d+))"))) << b_out;
  ASSERT_TRUE(std::regex_search(a_out, on_a, std::regex(R"(RESTORED step=(\d+))"))) << a_out;
  EXPECT_EQ(on_a[1], on_b[1]);
  EXPECT_GE(std::stoi(on_b[1]), 100) << b_out;
  // Node 0's new rank has the state of that step from its buddy copy, or else from rank 1.
  const std::string step = on_b[1].str();
  EXPECT_TRUE(a_out.find("rank 0: fetched the buddy copies of step " + step) != std::string::npos ||
              a_out.find("rank 0 holds no in-memory snapshot of step " + step + "; receiving rank 1's copy") !=
                  std::string::npos)
      << a_out;
  ASSERT_TRUE(std::regex_search(a_out, digest_a, std::regex(R"(DIGEST rank=0 ([0-9a-f]{16}))"))) << a_out;
  ASSERT_TRUE(std::regex_search(b_out, digest_b, std::regex(R"(DIGEST rank=1 ([0-9a-f]{16}))"))) << b_out;
  EXPECT_EQ(digest_a[1], digest_b[1]);
}

// The same in an elastic job at its maximum with a spare, and with peers off (each rank restores
// only its own rank's state, as sharded state must). The new service's first round keeps the
// survivor's group rank (it says where it was) and takes the spare only after the survivor (it
// says it had no place), whichever rejoins first: every rank resumes at one step, the survivor's
// from its own snapshot, the new host's from its buddy copy on the survivor. Before, the new
// service placed nodes in join order, so a spare that rejoined first took the survivor's place.
TEST_F(MultiNodeTest, AServiceStartedAgainGivesTheSurvivorItsPlaceBeforeTheSpare) {
  Cluster(3);
  const std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  auto node = [&](int i) {
    return ElasticNode(
        i, 29519, "kept",
        {"--snapshot-every", "10", Worker("snapshot_resume.py"), "150", "--first-attempt-runs-on", "--say-every", "10"},
        "keep_alive_interval=0.5,keep_alive_max_attempt=20,join_timeout=60",
        {{"PYTHON_EXEC", *py}, {"DTRUN_SNAPSHOT_PEERS", "off"}});
  };
  auto a = node(0);
  auto b = node(1);
  ASSERT_TRUE(b->WaitForOutput("STEP 100", seconds(120))) << b->all() << "\nnode 0:\n" << a->all();
  auto spare = node(2);
  ASSERT_TRUE(spare->WaitForOutput("spare", seconds(30))) << spare->all();
  ::kill(a->pid(), SIGKILL);
  ASSERT_TRUE(a->Wait(seconds(10)).has_value());
  auto again = node(0);
  EXPECT_EQ(again->Wait(seconds(120)), 0) << again->all() << "\nnode 1:\n" << b->all() << "\nspare:\n" << spare->all();
  EXPECT_EQ(b->Wait(seconds(60)), 0) << b->all();
  EXPECT_TRUE(spare->Wait(seconds(60)).has_value()) << spare->all();
  const std::string a_out = again->all(), b_out = b->all();
  EXPECT_EQ(spare->out().find("RESTORED"), std::string::npos) << "the spare ran workers:\n" << spare->all();
  std::smatch on_a, on_b, digest_a, digest_b;
  ASSERT_TRUE(std::regex_search(b_out, on_b, std::regex(R"(RESTORED step=(\d+))"))) << b_out;
  ASSERT_TRUE(std::regex_search(a_out, on_a, std::regex(R"(RESTORED step=(\d+))"))) << a_out;
  EXPECT_EQ(on_a[1], on_b[1]);
  EXPECT_GE(std::stoi(on_b[1]), 100) << b_out;
  // Node 1 kept its ranks, so with peers off its own snapshot served, and node 0's came from node 1.
  EXPECT_EQ(b_out.find("fetched the buddy copies"), std::string::npos) << b_out;
  EXPECT_NE(a_out.find("fetched the buddy copies of step " + on_a[1].str()), std::string::npos) << a_out;
  ASSERT_TRUE(std::regex_search(a_out, digest_a, std::regex(R"(DIGEST rank=(\d) ([0-9a-f]{16}))"))) << a_out;
  ASSERT_TRUE(std::regex_search(b_out, digest_b, std::regex(R"(DIGEST rank=(\d) ([0-9a-f]{16}))"))) << b_out;
  EXPECT_EQ(digest_a[2], digest_b[2]);
}

// The service's host lost together with another member (a rack, a power feed they share): the
// host's dtrun is started again, the other member stays gone. The new service cannot tell a lost
// member from one on its way; it waits for the last round's members a lease from its start, as
// long as a running service would have given the lost one, and then the spare takes the empty
// place. Last call is as long as the join timeout here: before, the round formed only then.
TEST_F(MultiNodeTest, AServiceStartedAgainTakesTheSpareALeaseLaterWhenAMemberWasLostWithItsHost) {
  Cluster(4);
  const std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  auto node = [&](int i) {
    std::vector<std::string> argv = cluster_->Exec(i);
    const std::vector<std::string> rest = {
        DtrunBinary(),
        "--nnodes",
        "3:3",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        cluster_->address(0) + ":29520",
        "--rdzv-id",
        "lostwith",
        "--local-addr",
        cluster_->address(i),
        "--rdzv-conf",
        "keep_alive_interval=0.5,keep_alive_max_attempt=20,join_timeout=600,last_call_timeout=600",
        "--snapshot-every",
        "10",
        Worker("snapshot_resume.py"),
        "150",
        "--first-attempt-runs-on",
        "--say-every",
        "10"};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return std::make_unique<Harness>(argv, std::map<std::string, std::string>{{"PYTHON_EXEC", *py}});
  };
  auto a = node(0);
  auto b = node(1);
  auto c = node(2);
  ASSERT_TRUE(b->WaitForOutput("STEP 100", seconds(120))) << b->all() << "\nnode 0:\n" << a->all();
  auto spare = node(3);
  ASSERT_TRUE(spare->WaitForOutput("spare", seconds(30))) << spare->all();
  ::kill(c->pid(), SIGKILL);
  ::kill(a->pid(), SIGKILL);
  ASSERT_TRUE(c->Wait(seconds(10)).has_value());
  ASSERT_TRUE(a->Wait(seconds(10)).has_value());
  auto again = node(0);
  EXPECT_EQ(again->Wait(seconds(120)), 0) << again->all() << "\nnode 1:\n" << b->all() << "\nspare:\n" << spare->all();
  EXPECT_EQ(b->Wait(seconds(60)), 0) << b->all();
  EXPECT_EQ(spare->Wait(seconds(60)), 0) << spare->all();
  std::set<std::string> steps, digests;
  for (auto* h : {again.get(), b.get(), spare.get()}) {
    const std::string out = h->all();
    std::smatch step, digest;
    ASSERT_TRUE(std::regex_search(out, step, std::regex(R"(RESTORED step=(\d+))"))) << out;
    EXPECT_GE(std::stoi(step[1]), 100) << out;
    ASSERT_TRUE(std::regex_search(out, digest, std::regex(R"(DIGEST rank=\d ([0-9a-f]{16}))"))) << out;
    steps.insert(step[1]);
    digests.insert(digest[1]);
  }
  EXPECT_EQ(steps.size(), 1u) << *steps.begin();
  EXPECT_EQ(digests.size(), 1u) << *digests.begin();
}

// The same in an elastic job at its maximum: the agent started again replaces the dead one at its
// address and the round re-forms with it, where it used to wait as a spare while the round re-formed
// with the dead node (joined earlier) until that one's lease ran out. Each host has a launch
// registry of its own, as separate machines do.
TEST_F(MultiNodeTest, AnElasticNodeStartedAgainRightAfterItsAgentDiedReplacesItWithoutWaitingOutTheLease) {
  Cluster(2);
  const std::string dir = MakeTempDir();
  auto elastic = [&](int i) {
    const std::string runtime = dir + "/host" + std::to_string(i);
    ::mkdir(runtime.c_str(), 0700);
    return ElasticNode(i, 29517, "again", {Worker("idle_until_stopped.sh")},
                       "keep_alive_interval=2,keep_alive_max_attempt=30,join_timeout=60",
                       {{"DTRUN_RUNTIME_DIR", runtime}});
  };
  auto n0 = elastic(0);
  auto n1 = elastic(1);
  ASSERT_TRUE(n0->WaitForOutput("READY")) << n0->all();
  ASSERT_TRUE(n1->WaitForOutput("READY")) << n1->all();
  ::kill(n1->pid(), SIGKILL);
  ASSERT_TRUE(n1->Wait(seconds(10)).has_value());
  auto back = elastic(1);
  ASSERT_TRUE(back->WaitForOutput("READY", seconds(50))) << back->all() << "\nnode 0:\n" << n0->all();
  EXPECT_TRUE(
      n0->WaitForOutput("(" + cluster_->address(1) + ") was started again: its earlier agent is gone", seconds(10)))
      << n0->all();
  EXPECT_EQ(n0->err().find("lost: no keep-alive"), std::string::npos) << n0->all();
  ::kill(n0->pid(), SIGTERM);
  ::kill(back->pid(), SIGTERM);
  EXPECT_EQ(n0->Wait(), 128 + SIGTERM) << n0->all();
  EXPECT_TRUE(back->Wait().has_value());
}

TEST_F(MultiNodeTest, SurvivorExitsSoonAfterTheJobFailsWithoutWaitingForTheDeadNode) {
  Cluster(2);
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  // Node 0's worker fails as soon as node 1's dtrun is gone (as a collective would), with no
  // restarts left: the job is over, and node 0 (the service host) has only a dead node to wait for.
  auto n0 = Node(0, {"--nproc-per-node", "1"},
                 {"/bin/sh", "-c", "echo READY 0; while kill -0 $PEER 2>/dev/null; do sleep 0.05; done; exit 3"},
                 {{"PEER", std::to_string(n1->pid())}});
  ASSERT_TRUE(n0->WaitForOutput("READY 0"));
  ASSERT_TRUE(n1->WaitForOutput("READY 1"));
  ::kill(n1->pid(), SIGKILL);
  ASSERT_TRUE(n1->Wait(std::chrono::seconds(10)).has_value());  // reaped: kill -0 now fails
  ASSERT_TRUE(n0->WaitForOutput("Root Cause", std::chrono::seconds(10))) << n0->all();
  // Before: 10 s more, waiting for the dead node to "leave"; now one missed keep-alive (0.25 s).
  EXPECT_EQ(n0->Wait(std::chrono::seconds(3)), 3) << n0->all();
}

TEST_F(MultiNodeTest, LostMasterMakesEveryOtherNodeCleanUpAndExit) {
  Cluster(2);
  auto n0 = Node(0, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(n0->WaitForOutput("READY 0"));
  ASSERT_TRUE(n1->WaitForOutput("READY 1"));
  ::kill(n0->pid(), SIGKILL);
  EXPECT_EQ(n1->Wait(std::chrono::seconds(20)), 1) << n1->all();
  EXPECT_NE(n1->err().find("lost the rendezvous service (master) at " + cluster_->address(0)), std::string::npos)
      << n1->all();
}

TEST_F(MultiNodeTest, CutLinkIsDetectedOnBothSides) {
  Cluster(2);
  auto n0 = Node(0, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  auto n1 = Node(1, {"--nproc-per-node", "1"}, {Worker("idle_until_stopped.sh")});
  ASSERT_TRUE(n0->WaitForOutput("READY 0"));
  ASSERT_TRUE(n1->WaitForOutput("READY 1"));
  cluster_->SetLink(1, false);
  EXPECT_TRUE(n0->WaitForOutput("lost: no keep-alive", std::chrono::seconds(10))) << n0->all();
  EXPECT_EQ(n1->Wait(std::chrono::seconds(20)), 1) << n1->all();
  EXPECT_NE(n1->err().find("lost the rendezvous service"), std::string::npos) << n1->all();
  ::kill(n0->pid(), SIGTERM);
  EXPECT_TRUE(n0->Wait().has_value());
}

TEST_F(MultiNodeTest, WrongTokenAndDuplicateRankAreRejectedAndTheJobStillRuns) {
  Cluster(3);
  const std::vector<std::string> program = {"/bin/sh", "-c", "echo rank=$RANK world=$WORLD_SIZE; exec sleep 300"};
  auto n0 = Node(0, {"--nproc-per-node", "1"}, program);
  auto intruder = Node(1, {"--nproc-per-node", "1"}, {"/bin/true"}, {}, 2, 1, "wrong");
  EXPECT_EQ(intruder->Wait(), 1) << intruder->all();
  EXPECT_NE(intruder->err().find("wrong rendezvous token"), std::string::npos) << intruder->all();
  auto n1 = Node(1, {"--nproc-per-node", "1"}, program);
  ASSERT_TRUE(n1->WaitForOutput("rank=1 world=2")) << n1->all();
  // Rank 1 asked for from host 2: it waits for node 1's next keep-alive, then is a duplicate.
  auto dup = Node(2, {"--nproc-per-node", "1"}, {"/bin/true"}, {}, 2, /*rank=*/1);
  EXPECT_EQ(dup->Wait(), 1) << dup->all();
  EXPECT_NE(dup->err().find("node rank 1 has already joined from node 1 (" + LocalHostName() + ", " +
                            cluster_->address(1) + "), which is alive"),
            std::string::npos)
      << dup->all();
  // The running job was not disturbed: still round 0, still running.
  EXPECT_FALSE(WaitForPidExit(n0->pid(), std::chrono::milliseconds(0)));
  EXPECT_EQ(n0->all().find("round"), std::string::npos) << n0->all();
  ::kill(n0->pid(), SIGTERM);
  ::kill(n1->pid(), SIGTERM);
  EXPECT_EQ(n0->Wait(), 128 + SIGTERM) << n0->all();
  EXPECT_EQ(n1->Wait(), 128 + SIGTERM) << n1->all();
}

TEST_F(MultiNodeTest, ElasticLateJoinerEntersAtTheNextRound) {
  Cluster(2);
  auto elastic = [&](int i) {
    std::vector<std::string> argv = cluster_->Exec(i);
    std::vector<std::string> rest = {
        DtrunBinary(), "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
        cluster_->address(0) + ":29512", "--rdzv-id", "el", "--local-addr", cluster_->address(i), "--rdzv-conf",
        "last_call_timeout=0.2,keep_alive_interval=0.2", "/bin/sh", "-c",
        "echo round=$TORCHELASTIC_RESTART_COUNT world=$WORLD_SIZE rank=$RANK; exec sleep 300"};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return std::make_unique<Harness>(argv);
  };
  auto a = elastic(0);
  ASSERT_TRUE(a->WaitForOutput("round=0 world=1 rank=0")) << a->all();
  auto b = elastic(1);
  ASSERT_TRUE(b->WaitForOutput("round=1 world=2 rank=1")) << b->all();
  ASSERT_TRUE(a->WaitForOutput("round=1 world=2 rank=0")) << a->all();
  ::kill(b->pid(), SIGTERM);  // b leaves: a goes on alone (>= min) in the next round
  ASSERT_TRUE(a->WaitForOutput("round=2 world=1 rank=0")) << a->all();
  ::kill(a->pid(), SIGTERM);
  EXPECT_EQ(a->Wait(), 128 + SIGTERM);
  EXPECT_EQ(b->Wait(), 128 + SIGTERM);
}

// The same for an elastic job's agent-hosted service: the endpoint host's dtrun SIGKILLed and
// started again; the other node joins the new service, whose round is 1.
TEST_F(MultiNodeTest, AnElasticJobsServiceHostStartedAgainGetsTheOtherNodeBackInANewRound) {
  Cluster(2);
  auto elastic = [&](int i) {
    return ElasticNode(i, 29512, "el",
                       {"/bin/sh", "-c", "echo round=$TORCHELASTIC_RESTART_COUNT world=$WORLD_SIZE; exec sleep 300"},
                       "keep_alive_interval=0.5,keep_alive_max_attempt=20");
  };
  auto a = elastic(0);
  auto b = elastic(1);
  ASSERT_TRUE(a->WaitForOutput("round=0 world=2")) << a->all();
  ASSERT_TRUE(b->WaitForOutput("round=0 world=2")) << b->all();
  ::kill(a->pid(), SIGKILL);
  ASSERT_TRUE(a->Wait(seconds(10)).has_value());
  auto again = elastic(0);
  EXPECT_TRUE(b->WaitForOutput("round=1 world=2", seconds(30))) << b->all() << again->all();
  EXPECT_TRUE(again->WaitForOutput("round=1 world=2", seconds(30))) << again->all();
  EXPECT_NE(b->err().find("does not know this node (it declared it lost, or it was started again)"), std::string::npos)
      << b->all();
  ::kill(again->pid(), SIGTERM);
  ::kill(b->pid(), SIGTERM);
  EXPECT_EQ(again->Wait(), 128 + SIGTERM) << again->all();
  EXPECT_EQ(b->Wait(), 128 + SIGTERM) << b->all();
}

TEST_F(MultiNodeTest, ElasticSpareIsPromotedWhenAMemberDies) {
  Cluster(3);
  auto elastic = [&](int i) {
    return ElasticNode(i, 29513, "sp", {"/bin/sh", "-c", "echo round=$TORCHELASTIC_RESTART_COUNT rank=$RANK host=" +
                                                             std::to_string(i) + "; exec sleep 300"});
  };
  auto a = elastic(0);
  auto b = elastic(1);
  // Ranks follow join order, which the two hosts race for.
  ASSERT_TRUE(a->WaitForOutput("round=0 rank=")) << a->all();
  ASSERT_TRUE(b->WaitForOutput("round=0 rank=")) << b->all();
  auto spare = elastic(2);
  ASSERT_TRUE(spare->WaitForOutput("spare")) << spare->all();
  EXPECT_EQ(spare->out().find("round="), std::string::npos) << "a spare runs no workers";
  ::kill(b->pid(), SIGKILL);
  ASSERT_TRUE(spare->WaitForOutput("round=1 rank=", std::chrono::seconds(15))) << spare->all();
  ASSERT_TRUE(a->WaitForOutput("round=1 rank=")) << a->all();
  ::kill(a->pid(), SIGTERM);
  ::kill(spare->pid(), SIGTERM);
  EXPECT_TRUE(a->Wait().has_value());
  EXPECT_TRUE(spare->Wait().has_value());
}

// Warm workers on a spare: the members' workers say their program parks, the rendezvous tells
// every node, the waiting spare parks a worker, and when a member is lost the spare's worker is
// released into the new round (with that round's environment) instead of being spawned.
TEST_F(MultiNodeTest, ASparesParkedWorkerIsReleasedWhenItIsPromoted) {
  Cluster(3);
  const std::string dir = MakeTempDir();
  auto elastic = [&](int i) {
    return ElasticNode(i, 29515, "warm", {"--max-restarts", "1", "--event-log",
                                          dir + "/events" + std::to_string(i) + ".jsonl", BinDir() + "/warm_probe"});
  };
  auto a = elastic(0);
  auto b = elastic(1);
  ASSERT_TRUE(a->WaitForOutput("restart=0")) << a->all();
  ASSERT_TRUE(b->WaitForOutput("restart=0")) << b->all();
  auto spare = elastic(2);
  ASSERT_TRUE(spare->WaitForOutput("started and parked", std::chrono::seconds(30))) << spare->all();
  ::kill(b->pid(), SIGKILL);
  EXPECT_EQ(spare->Wait(std::chrono::seconds(30)), 0) << spare->all();
  EXPECT_EQ(a->Wait(std::chrono::seconds(30)), 0) << a->all();
  std::vector<nlohmann::json> starts = EventsOfKind(dir + "/events2.jsonl", "worker_start");
  ASSERT_EQ(starts.size(), 1u) << spare->all();
  EXPECT_TRUE(starts[0]["warm"].get<bool>()) << starts[0];
  EXPECT_NE(spare->out().find("probe rank=" + std::to_string(starts[0]["rank"].get<int>()) + " restart=1 pid=" +
                              std::to_string(starts[0]["worker_pid"].get<int64_t>()) + " park_fd=unset"),
            std::string::npos)
      << spare->all();
}

// A whole node is lost (its dtrun SIGKILLed, its workers with it) in an elastic job with a spare
// and no shared storage: the spare takes the lost node's ranks and restores them from the copy of
// their in-memory snapshot that the lost node had pushed to its buddy, and every rank resumes at
// that step. The job runs with TLS and one certificate for every node that names only the
// rendezvous host: buddies verify each other by the job's CA, not by address. `dtrun status`
// shows each node's buddy and the step it holds.
// With peer restores off (ranks that are not replicas), a lost node's rank resumes from the copy
// its buddy holds, fetched by the spare that takes the rank over; every rank goes back to that step.
TEST_F(MultiNodeTest, ALostNodesRanksResumeFromItsBuddyCopyOnTheSpare) {
  Cluster(3);
  if (!std::filesystem::exists(BinDir() + "/train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const LostNodeRun run = LoseANodeToTheSpare(1, {{"DTRUN_SNAPSHOT_PEERS", "off"}});
  EXPECT_NE(run.spare.find("fetched the buddy copies of step"), std::string::npos) << run.spare;
  // The spare's takeover is a recovery of its own, with where the state came from.
  EXPECT_NE(run.spare.find("from the buddy node's copy of the in-memory snapshot"), std::string::npos) << run.spare;
  const std::string both = run.survivor + run.spare;
  EXPECT_NE(both.find("resuming from the in-memory snapshot of step"), std::string::npos) << both;
  EXPECT_NE(both.find("48 optimizer steps"), std::string::npos) << both;
}

// By default the spare's rank takes the survivor's newer snapshot (the ranks are replicas): the
// job goes back to the newest step the survivor holds, not to the buddy copy's step 3.
TEST_F(MultiNodeTest, ALostNodesRanksResumeFromTheSurvivorsNewestSnapshotNotTheOlderBuddyCopy) {
  Cluster(3);
  if (!std::filesystem::exists(BinDir() + "/train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const LostNodeRun run = LoseANodeToTheSpare(5, {});
  EXPECT_TRUE(std::regex_search(run.spare, std::regex("rank [01] holds no in-memory snapshot of step [0-9]+; "
                                                      "receiving rank [01]'s copy")))
      << run.spare;
  EXPECT_NE(run.spare.find("from another rank's in-memory snapshot of step"), std::string::npos) << run.spare;
  const std::string both = run.survivor + run.spare;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(both, m, std::regex("resuming from the in-memory snapshot of step ([0-9]+)"))) << both;
  // Both ranks had completed a snapshot of step 5 or later before the kill.
  EXPECT_GE(std::stoi(m[1]), 5) << both;
  EXPECT_NE(both.find("48 optimizer steps"), std::string::npos) << both;
}

// An elastic job of 1 to 2 nodes and no spare, as on a cluster whose nodes come and go: it grows
// from 1 rank to 3 when a node of two workers joins, and shrinks back when that node is lost. Each
// new world resumes from the in-memory state of the world before it (DDP ranks are replicas), not
// from the disk checkpoint: the joining node's ranks receive rank 0's copy (ranks that hold
// nothing have no say in the quorum), and after the loss the survivor restores the snapshot its
// three-rank world took.
TEST_F(MultiNodeTest, AnElasticJobThatGrowsAndShrinksResumesEachWorldFromTheStateOfTheOneBefore) {
  Cluster(2);
  if (!std::filesystem::exists(BinDir() + "/train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string data = TrainingData(), dir = MakeTempDir();
  const std::string endpoint = cluster_->address(0) + ":29516";
  auto elastic = [&](int i) {
    std::vector<std::string> argv = cluster_->Exec(i);
    std::vector<std::string> rest = {
        DtrunBinary(), "--nnodes", "1:2", "--nproc-per-node", std::to_string(i + 1), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint, "--rdzv-id", "grow", "--local-addr", cluster_->address(i), "--rdzv-conf",
        "last_call_timeout=0.2,keep_alive_interval=0.5,keep_alive_max_attempt=4", "--max-restarts", "3",
        "--snapshot-every", "3", BinDir() + "/train_imagenet", data, "-b", "16", "--lr", "0.02", "--image-size", "64",
        "-j", "1", "--epochs", "8", "-p", "1", "--save-every-minutes", "1000", "--output-dir",
        dir + "/host" + std::to_string(i)};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return std::make_unique<Harness>(argv);
  };
  auto ask = [&] {
    std::vector<std::string> argv = cluster_->Exec(0);
    argv.insert(argv.end(), {DtrunBinary(), "status", "--json", "--endpoint", endpoint, "--run-id", "grow"});
    return ParseJsonLines(RunToEnd(argv).second);
  };
  // Every rank of a world of `ranks` has a snapshot of `step` or later.
  auto snapshotted = [&](size_t ranks, int64_t step) {
    return [ranks, step](const nlohmann::json& job) {
      size_t done = 0, seen = 0;
      for (const nlohmann::json& node : job.value("nodes", nlohmann::json::array())) {
        for (const nlohmann::json& r : node.value("ranks", nlohmann::json::array())) {
          ++seen;
          done += r.value("snapshot_step", nlohmann::json()).is_number() && r["snapshot_step"] >= step;
        }
      }
      return seen == ranks && done == ranks;
    };
  };
  auto a = elastic(0);
  ASSERT_TRUE(snapshotted(1, 3)(AwaitStatus(ask, snapshotted(1, 3), seconds(120)))) << a->all();
  auto b = elastic(1);
  ASSERT_TRUE(b->WaitForOutput("rank 1 holds no in-memory snapshot of step", seconds(120))) << b->all() << a->all();
  ASSERT_TRUE(b->WaitForOutput("rank 2 holds no in-memory snapshot of step", seconds(60))) << b->all();
  EXPECT_NE(b->all().find("receiving rank 0's copy"), std::string::npos) << b->all();
  ASSERT_TRUE(a->WaitForOutput("taken by a world of 1 ranks)", seconds(60))) << a->all() << b->all();
  std::smatch grown;
  const std::string a_out = a->all();
  ASSERT_TRUE(std::regex_search(a_out, grown, std::regex(R"(resuming from the in-memory snapshot of step (\d+) \(epoch (\d+), batch (\d+), taken by a world of 1 ranks\))")))
      << a_out;
  EXPECT_GE(std::stoi(grown[1]), 3) << a_out;
  // Mid-epoch, the three ranks go on at the samples the one had trained (epoch_position.h).
  auto expect_rescaled = [](Harness& h, const std::smatch& at, int64_t from, int64_t to) {
    const int64_t batch = std::stoll(at[3]);
    if (batch == 0) return;
    const std::string line = "epoch " + std::string(at[2]) + " was saved at batch " + std::to_string(batch) + " of " +
                             std::to_string(from) + " samples a step; at this run's " + std::to_string(to) +
                             " samples a step it goes on at batch " + std::to_string(batch * from / to);
    EXPECT_TRUE(h.WaitForOutput(line, seconds(60))) << line << "\n" << h.all();
  };
  expect_rescaled(*a, grown, 16, 48);
  // Host 0 restores what it holds: it does not ask its buddy for copies of the new world.
  EXPECT_EQ(a_out.find("holds no copy of it"), std::string::npos) << a_out;
  // The three-rank world snapshots past the state it started from; then host 1 is lost.
  const int64_t past = std::stoi(grown[1]) + 3;
  ASSERT_TRUE(snapshotted(3, past)(AwaitStatus(ask, snapshotted(3, past), seconds(120)))) << a->all() << b->all();
  ::kill(b->pid(), SIGKILL);
  ASSERT_TRUE(a->WaitForOutput("taken by a world of 3 ranks)", seconds(120))) << a->all();
  std::smatch shrunk;
  const std::string after = a->all();
  ASSERT_TRUE(std::regex_search(after, shrunk, std::regex(R"(resuming from the in-memory snapshot of step (\d+) \(epoch (\d+), batch (\d+), taken by a world of 3 ranks\))")))
      << after;
  EXPECT_GE(std::stoi(shrunk[1]), past) << after;
  expect_rescaled(*a, shrunk, 48, 16);
  EXPECT_EQ(a->Wait(seconds(300)), 0) << a->all();
}

// The waits of every rank meet at the rendezvous (in the keep-alives' status summaries): a rank
// of host 1 slowed in its backward is named, with its node, on both hosts: a console line and an
// event-log record.
TEST_F(MultiNodeTest, ARankSlowedOnOneHostIsNamedWithItsNodeOnEveryHost) {
  Cluster(2);
  if (!BinaryBuilt("train_recsys")) GTEST_SKIP() << "built without LibTorch";
  const std::string dir = MakeTempDir();
  const std::string ratings = MakeRatings(200, 400);
  std::vector<std::unique_ptr<Harness>> nodes;
  for (int i = 0; i < 2; ++i) {
    const std::string host = std::to_string(i);
    nodes.push_back(Node(i, {"--nproc-per-node", "2", "--event-log", dir + "/events" + host + ".jsonl"},
                         {BinDir() + "/train_recsys", ratings, "--output-dir", dir + "/out" + host, "--epochs",
                          "3", "-b", "64", "-p", "1000", "--no-tensorboard"},
                         {{"DTRUN_FAULT_SLOW", "3:3:40"}, {"OMP_NUM_THREADS", "1"}}));
  }
  for (auto& n : nodes) ASSERT_EQ(n->Wait(std::chrono::seconds(240)), 0) << n->all();
  for (int i = 0; i < 2; ++i) {
    const std::vector<nlohmann::json> events = EventsOfKind(dir + "/events" + std::to_string(i) + ".jsonl", "straggler");
    ASSERT_FALSE(events.empty()) << "host " << i << ":\n" << nodes[i]->all();
    const nlohmann::json& named = events[0];
    EXPECT_EQ(named["rank"], 3) << named.dump();
    EXPECT_EQ(named["kind"], "rank") << "the others wait for it alike: " << named.dump();
    EXPECT_NE(named["node"].get<std::string>().find(cluster_->address(1)), std::string::npos) << named.dump();
    EXPECT_NE(nodes[i]->all().find("straggler: rank 3 on node 1"), std::string::npos) << nodes[i]->all();
  }
}

// --on-straggler replace: rank 1 is slowed in its backward; once it is named, the node running it
// goes to the spares and the spare takes its group rank, and the job ends with every planned step.
TEST_F(MultiNodeTest, OnStragglerReplaceSwapsTheSlowRanksNodeForTheSpareOnce) {
  Cluster(3);
  if (!BinaryBuilt("train_recsys")) GTEST_SKIP() << "built without LibTorch";
  const std::string dir = MakeTempDir();
  const std::string ratings = MakeRatings(200, 400);
  auto node = [&](int i) {
    const std::string h = std::to_string(i);
    std::vector<std::string> argv = cluster_->Exec(i);
    for (const std::string& a : std::vector<std::string>{
             DtrunBinary(), "--nnodes", "2:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             cluster_->address(0) + ":29514", "--rdzv-id", "replace", "--local-addr", cluster_->address(i),
             "--rdzv-conf", "keep_alive_interval=0.5,keep_alive_max_attempt=4", "--max-restarts", "0",
             "--on-straggler", "replace", "--event-log", dir + "/events" + h + ".jsonl", BinDir() + "/train_recsys",
             ratings, "--output-dir", dir + "/out" + h, "--epochs", "4", "-b", "64", "-p", "1000",
             "--no-tensorboard"}) {
      argv.push_back(a);
    }
    return std::make_unique<Harness>(argv, std::map<std::string, std::string>{{"DTRUN_FAULT_SLOW", "1:3:40"},
                                                                              {"OMP_NUM_THREADS", "1"}});
  };
  auto a = node(0);
  auto b = node(1);
  // The job runs (whichever node's rank 0 prints the epochs: ranks follow the join order) once a's
  // rank has a snapshot copy on its buddy.
  ASSERT_TRUE(a->WaitForOutput("holds a copy of its snapshot", std::chrono::seconds(120))) << a->all();
  auto spare = node(2);
  ASSERT_TRUE(spare->WaitForOutput("spare", std::chrono::seconds(60))) << spare->all();
  for (auto* h : {a.get(), b.get(), spare.get()}) EXPECT_EQ(h->Wait(std::chrono::seconds(240)), 0) << h->all();
  const std::string all = a->all() + b->all() + spare->all();
  EXPECT_NE(all.find("is replaced by a spare (--on-straggler replace): rank 1"), std::string::npos) << all;
  // Once, although rank 1 stays slow on the node that took it over.
  size_t replaced = 0;
  for (size_t at = a->all().find("is replaced by a spare"); at != std::string::npos;
       at = a->all().find("is replaced by a spare", at + 1)) {
    ++replaced;
  }
  EXPECT_EQ(replaced, 1u) << a->all();
}

// A whole rack is lost at once: two racks of two nodes (declared with --failure-domain, ranks
// placed by --node-rank so that each rack holds consecutive group ranks, as Slurm places them),
// and both nodes of rack b are SIGKILLed together. Buddies in the next group rank would have kept
// rank 2's copy on rank 3's node, lost with it; with failure domains each node of rack b copied to
// rack a, so the two spares (of a third rack) fetch both lost ranks' copies from rack a, from where
// the earlier rounds sent them rather than from their new buddies. Every rank resumes at that step
// and the job ends with the parameters of a one-host job that resumed at that step.
TEST_F(MultiNodeTest, ALostRacksRanksResumeFromCopiesKeptInTheOtherRack) {
  Cluster(6);
  const std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  constexpr int kSteps = 300;
  // Peer restores off: the ranks are replicas, and this test is about the copies.
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", *py}, {"DTRUN_SNAPSHOT_PEERS", "off"}};
  auto node = [&](int i, const std::string& rack, const std::string& run, bool lose) {
    std::vector<std::string> argv = cluster_->Exec(i);
    std::vector<std::string> rest = {
        DtrunBinary(), "--nnodes", "4:4", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
        cluster_->address(0) + ":29518", "--rdzv-id", run, "--local-addr", cluster_->address(i), "--failure-domain",
        rack, "--rdzv-conf", "keep_alive_interval=0.5,keep_alive_max_attempt=4,join_timeout=60", "--max-restarts", "3",
        "--snapshot-every", "1",
        // Only each round's first snapshot travels: the step every rank then restores is early.
        "--snapshot-buddy-every", "100000", Worker("snapshot_resume.py"), std::to_string(kSteps)};
    if (lose) rest.push_back("--first-attempt-runs-on");
    if (i < 4) rest.insert(rest.begin() + 1, {"--node-rank", std::to_string(i)});  // where the first round places it
    argv.insert(argv.end(), rest.begin(), rest.end());
    return std::make_unique<Harness>(argv, env);
  };
  auto rack = [](int i) { return i < 2 ? "rack-a" : "rack-b"; };
  std::vector<std::unique_ptr<Harness>> members;
  for (int i = 0; i < 4; ++i) members.push_back(node(i, rack(i), "racks", /*lose=*/true));
  for (int i : {2, 3}) {
    ASSERT_TRUE(members[i]->WaitForOutput("holds a copy of its snapshot of step", seconds(180)))
        << "host " << i << ":\n"
        << members[i]->all() << "\nhost 0:\n"
        << members[0]->all();
  }
  // Rack b's nodes copy to rack a, and say so.
  EXPECT_NE(members[2]->all().find("in failure domain rack-a"), std::string::npos) << members[2]->all();
  std::vector<std::unique_ptr<Harness>> spares;
  for (int i : {4, 5}) {
    spares.push_back(node(i, "rack-c", "racks", /*lose=*/true));
    ASSERT_TRUE(spares.back()->WaitForOutput("spare", seconds(60))) << spares.back()->all();
  }
  // `dtrun status` counts the nodes of each domain.
  std::vector<std::string> ask = cluster_->Exec(5);
  ask.insert(ask.end(), {DtrunBinary(), "status", "--endpoint", cluster_->address(0) + ":29518", "--run-id", "racks"});
  const auto [asked, status] = RunToEnd(ask);
  EXPECT_NE(status.find("\nfailure domains: rack-a (2 nodes), rack-b (2 nodes), rack-c (2 nodes)\n"), std::string::npos)
      << status;
  ::kill(members[2]->pid(), SIGKILL);
  ::kill(members[3]->pid(), SIGKILL);
  std::vector<std::string> outputs, restored;
  for (auto* h : {members[0].get(), members[1].get(), spares[0].get(), spares[1].get()}) {
    EXPECT_EQ(h->Wait(seconds(300)), 0) << h->all();
    outputs.push_back(h->all());
    std::smatch step;
    EXPECT_TRUE(std::regex_search(outputs.back(), step, std::regex(R"(RESTORED step=(\d+))"))) << outputs.back();
    restored.push_back(step.size() > 1 ? step[1].str() : "0");
  }
  for (auto& spare : spares) {
    const std::string out = spare->all();
    const std::string rack_a =
        std::regex_replace(cluster_->address(0) + "|" + cluster_->address(1), std::regex(R"(\.)"), R"(\.)");
    EXPECT_TRUE(std::regex_search(out, std::regex("fetched the buddy copies of step [0-9]+ .* from (" + rack_a + "):")))
        << out;
  }
  ASSERT_EQ(std::set<std::string>(restored.begin(), restored.end()).size(), 1u) << restored[0];
  ASSERT_GT(std::stoi(restored[0]), 0);
  ASSERT_LT(std::stoi(restored[0]), kSteps);
  // The parameters are those of a one-host job that resumed at that step from its own memory. (Not
  // bit for bit those of a job that never stopped: DDP re-buckets after a process's first step, so
  // with more than two ranks a resumed process's first sums come in another order; the script's
  // --find-unused avoids that, PythonSnapshotTest.FourRanksWhoseDdpKeepsItsBuckets...)
  // Peers on here: the crash comes right after step 1's snapshot, and on a busy machine a
  // survivor may be stopped before its own first dtrun.snapshot() call, which nothing can keep
  // for it. Its replicas then send it their copy, as DDP's ranks allow.
  auto [rc, reference] =
      RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "4", "--max-restarts", "1", "--snapshot-every", "1",
                Worker("snapshot_resume.py"), std::to_string(kSteps), "--crash-at", restored[0]},
               {{"PYTHON_EXEC", *py}});
  ASSERT_EQ(rc, 0) << reference;
  std::smatch digest;
  ASSERT_TRUE(std::regex_search(reference, digest, std::regex(R"(DIGEST rank=0 ([0-9a-f]{16}))"))) << reference;
  ASSERT_NE(reference.find("RESTORED step=" + restored[0]), std::string::npos) << reference;
  for (const std::string& out : outputs) {
    EXPECT_NE(out.find(" " + digest[1].str()), std::string::npos) << "the reference ended at " << digest[1] << "\n"
                                                                  << out;
  }
}

// The same for a Python script (dtrun.snapshot / dtrun.restore): a lost node's rank resumes on the
// spare from the buddy copy of its snapshot, every rank at that step, and the job ends with the
// parameters of a run that never lost a node (Gloo on CPU, deterministic batches).
TEST_F(MultiNodeTest, APythonScriptsLostRankResumesFromItsBuddyCopyOnTheSpare) {
  Cluster(3);
  const std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  constexpr int kSteps = 400;
  // Peer restores off: the survivor's first attempt runs past kSteps, so its own newest step
  // would end the script at once; this test is about the buddy copy.
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", *py}, {"DTRUN_SNAPSHOT_PEERS", "off"}};
  auto [rc, reference] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2",
                                   Worker("snapshot_resume.py"), std::to_string(kSteps)}, env);
  ASSERT_EQ(rc, 0) << reference;
  std::smatch digest;
  ASSERT_TRUE(std::regex_search(reference, digest, std::regex(R"(DIGEST rank=0 ([0-9a-f]{16}))"))) << reference;

  const std::string endpoint = cluster_->address(0) + ":29515";
  auto elastic = [&](int i) {
    std::vector<std::string> argv = cluster_->Exec(i);
    std::vector<std::string> rest = {
        DtrunBinary(), "--nnodes", "2:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
        endpoint, "--rdzv-id", "pybuddy", "--local-addr", cluster_->address(i), "--rdzv-token", "tok",
        "--rdzv-conf", "keep_alive_interval=0.5,keep_alive_max_attempt=4,join_timeout=60", "--max-restarts", "2",
        "--snapshot-every", "1",
        // Only the first snapshot travels: the step every rank then restores is known to be early.
        "--snapshot-buddy-every", "100000", Worker("snapshot_resume.py"), std::to_string(kSteps),
        "--first-attempt-runs-on"};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return std::make_unique<Harness>(argv, env);
  };
  auto a = elastic(0);
  auto b = elastic(1);
  ASSERT_TRUE(b->WaitForOutput("holds a copy of its snapshot of step", seconds(180)))
      << "host 1:\n" << b->all() << "\nhost 0:\n" << a->all();
  auto spare = elastic(2);
  ASSERT_TRUE(spare->WaitForOutput("spare", seconds(60))) << spare->all();
  ::kill(b->pid(), SIGKILL);
  EXPECT_EQ(a->Wait(seconds(300)), 0) << a->all();
  EXPECT_EQ(spare->Wait(seconds(60)), 0) << spare->all();
  EXPECT_NE(spare->all().find("fetched the buddy copies of step"), std::string::npos) << spare->all();
  std::smatch on_a, on_spare;
  const std::string a_out = a->all(), spare_out = spare->all();
  ASSERT_TRUE(std::regex_search(a_out, on_a, std::regex(R"(RESTORED step=(\d+))"))) << a_out;
  ASSERT_TRUE(std::regex_search(spare_out, on_spare, std::regex(R"(RESTORED step=(\d+))"))) << spare_out;
  EXPECT_EQ(on_a[1], on_spare[1]);
  EXPECT_LT(std::stoi(on_a[1]), kSteps);
  EXPECT_NE(a_out.find(" " + digest[1].str()), std::string::npos) << "the reference ended at " << digest[1] << "\n"
                                                                   << a_out;
  EXPECT_NE(spare_out.find(" " + digest[1].str()), std::string::npos) << spare_out;
}


// --snapshot-dir on each node's own disk, and the job run again with one node replaced (its disk
// empty, as a node Slurm or Kubernetes gives a requeued job in place of a lost one): the
// survivor loads its rank's kept state, the new node's rank receives a copy of it, and the job
// ends with the parameters of a run never stopped (Gloo on CPU, deterministic batches).
TEST_F(MultiNodeTest, ANodeReplacedBetweenTwoRunsTakesItsRankFromThePeerThatKeptItsState) {
  Cluster(2);
  const std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  constexpr int kMoreSteps = 20;
  const std::string dir = MakeTempDir();
  auto node = [&](int i, const std::string& disk, std::vector<std::string> script_args) {
    std::vector<std::string> program = {Worker("snapshot_resume.py"), std::to_string(kMoreSteps), "--fresh-runs-on"};
    program.insert(program.end(), script_args.begin(), script_args.end());
    return Node(i, {"--nproc-per-node", "1", "--snapshot-every", "50", "--snapshot-dir", disk}, program);
  };
  auto a = node(0, dir + "/host0", {"--say-every", "20"});
  auto b = node(1, dir + "/host1", {});
  ASSERT_TRUE(a->WaitForOutput("STEP 120", seconds(120))) << a->all() << b->all();
  ::kill(a->pid(), SIGTERM);
  ::kill(b->pid(), SIGTERM);
  ASSERT_TRUE(a->Wait(seconds(60)).has_value()) << a->all();
  ASSERT_TRUE(b->Wait(seconds(60)).has_value()) << b->all();
  EXPECT_NE(a->all().find("[dtrun] kept 1 rank's snapshots"), std::string::npos) << a->all();

  auto again = node(0, dir + "/host0", {});
  auto replaced = node(1, dir + "/new-host1", {});
  EXPECT_EQ(again->Wait(seconds(120)), 0) << again->all() << replaced->all();
  EXPECT_EQ(replaced->Wait(seconds(60)), 0) << replaced->all();
  EXPECT_NE(again->all().find("[dtrun] loaded 1 rank's snapshots"), std::string::npos) << again->all();
  EXPECT_EQ(replaced->all().find("[dtrun] loaded"), std::string::npos) << replaced->all();
  std::smatch on_a, on_new, digest_a, digest_new;
  const std::string a_out = again->all(), new_out = replaced->all();
  ASSERT_TRUE(std::regex_search(a_out, on_a, std::regex(R"(RESTORED step=(\d+))"))) << a_out;
  ASSERT_TRUE(std::regex_search(new_out, on_new, std::regex(R"(RESTORED step=(\d+))"))) << new_out;
  EXPECT_EQ(on_a[1], on_new[1]);
  EXPECT_GE(std::stoi(on_a[1]), 120) << a_out;
  EXPECT_NE(new_out.find("rank 1 holds no in-memory snapshot of step " + on_a[1].str() + "; receiving rank 0's copy"),
            std::string::npos)
      << new_out;  // the step it was stopped at, not the periodic snapshot of 100
  ASSERT_TRUE(std::regex_search(a_out, digest_a, std::regex(R"(DIGEST rank=0 ([0-9a-f]{16}))"))) << a_out;
  ASSERT_TRUE(std::regex_search(new_out, digest_new, std::regex(R"(DIGEST rank=1 ([0-9a-f]{16}))"))) << new_out;
  EXPECT_EQ(digest_a[1], digest_new[1]);

  auto [rc, never_stopped] =
      RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Worker("snapshot_resume.py"),
                std::to_string(std::stoi(on_a[1]) + kMoreSteps)},
               {{"PYTHON_EXEC", *py}, {"DTRUN_RUNTIME_DIR", MakeTempDir()}});
  ASSERT_EQ(rc, 0) << never_stopped;
  std::smatch digest;
  ASSERT_TRUE(std::regex_search(never_stopped, digest, std::regex(R"(DIGEST rank=0 ([0-9a-f]{16}))"))) << never_stopped;
  EXPECT_EQ(digest_a[1], digest[1]);
}

// --snapshot-dir on each node's own disk while the job's shape changes between runs, as the nodes
// Slurm gives a requeued job do: 2 ranks a node, then 1, then 2 again. The run of 1 a node
// supersedes only the files of the old world that map to its rank, so each disk keeps one older
// file of the world of 4. The third run goes on from the second's state, not from those leftovers
// of its own world size: before, each node took its leftover, and the whole job went back to the
// step the first run was stopped at.
TEST_F(MultiNodeTest, NodeLocalDirectoriesGoOnFromTheNewestStateWhenTheWorldShrinksAndGrowsBack) {
  Cluster(2);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  const std::string dir = MakeTempDir();
  auto run = [&](int per_node) {
    std::vector<std::unique_ptr<Harness>> nodes;
    for (int i = 0; i < 2; ++i) {
      nodes.push_back(Node(i,
                           {"--nproc-per-node", std::to_string(per_node), "--snapshot-every", "50", "--snapshot-dir",
                            dir + "/host" + std::to_string(i)},
                           {Worker("snapshot_resume.py"), "100000", "--fresh-runs-on", "--say-every", "20"}));
    }
    return nodes;
  };
  auto stop = [](std::vector<std::unique_ptr<Harness>>& nodes) {
    for (auto& n : nodes) ::kill(n->pid(), SIGTERM);
    for (auto& n : nodes) {
      ASSERT_TRUE(n->Wait(seconds(60)).has_value()) << n->all();
      EXPECT_NE(n->all().find("[dtrun] kept "), std::string::npos) << n->all();
    }
  };
  auto restored = [](Harness& node) {
    std::smatch m;
    const std::string out = node.all();
    return std::regex_search(out, m, std::regex(R"(RESTORED step=(\d+))")) ? std::stoi(m[1]) : -1;
  };
  auto first = run(2);
  ASSERT_TRUE(first[0]->WaitForOutput("STEP 60", seconds(120))) << first[0]->all() << first[1]->all();
  stop(first);

  auto second = run(1);
  ASSERT_TRUE(second[0]->WaitForOutput("RESTORED step=", seconds(120))) << second[0]->all() << second[1]->all();
  const int from_first = restored(*second[0]);
  ASSERT_GE(from_first, 59) << second[0]->all();  // a rank said STEP 60; the others were a step behind at most
  const int further = (from_first / 20 + 3) * 20;
  ASSERT_TRUE(second[0]->WaitForOutput("STEP " + std::to_string(further), seconds(120))) << second[0]->all();
  stop(second);
  // Each disk holds its rank's file of the world of 2 and one leftover of the world of 4.
  for (int i = 0; i < 2; ++i) {
    size_t of_four = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/host" + std::to_string(i))) {
      of_four += e.path().filename().string().find("-of-4.dtsnap") != std::string::npos;
    }
    EXPECT_EQ(of_four, 1u) << "host" << i;
  }

  auto third = run(2);
  ASSERT_TRUE(third[0]->WaitForOutput("RESTORED step=", seconds(120))) << third[0]->all() << third[1]->all();
  ASSERT_TRUE(third[1]->WaitForOutput("RESTORED step=", seconds(60))) << third[1]->all();
  EXPECT_GE(restored(*third[0]), further) << third[0]->all();
  EXPECT_EQ(restored(*third[1]), restored(*third[0])) << third[1]->all();
  EXPECT_TRUE(third[0]->WaitForOutput("taken by a world of 2 ranks (now 4)", seconds(60))) << third[0]->all();
  // Host 0's leftover goes, or a later run killed after copying some ranks could go back to it.
  EXPECT_NE(third[0]->all().find("removed 1 older file(s) of this world size"), std::string::npos) << third[0]->all();
  stop(third);
}

// A job killed on every node at once (no grace: the OOM killer, a scheduler's SIGKILL) with
// --snapshot-dir on each node's own disk. Each node's agent copies on its own clock, so each
// node's file holds another step of the same line, and no step is held by half of the three.
// Before, that sent the whole job back to its start (FRESH); now it goes on from the snapshot
// completed last, the newest of the three.
TEST_F(MultiNodeTest, AJobKilledOnEveryNodeAtOnceGoesOnFromTheNewestOfTheNodesCopies) {
  Cluster(3);
  if (!TorchPython()) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  const std::string dir = MakeTempDir();
  std::vector<std::string> dirs;
  for (int i = 0; i < 3; ++i) dirs.push_back(dir + "/host" + std::to_string(i));
  for (const std::string& d : dirs) std::filesystem::create_directories(d);
  auto file = [&](int i) { return dirs[i] + "/rank-" + std::to_string(i) + "-of-3.dtsnap"; };
  // Copies every 0.2, 1 and 3 s: the three files are far apart in steps most of the time.
  const std::vector<std::string> every = {"0.2", "1", "3"};
  auto run = [&](const std::string& steps) {
    std::vector<std::unique_ptr<Harness>> nodes;
    for (int i = 0; i < 3; ++i) {
      nodes.push_back(Node(i,
                           {"--nproc-per-node", "1", "--snapshot-every", "1", "--snapshot-dir", dirs[i],
                            "--snapshot-dir-every", every[i]},
                           {Worker("snapshot_resume.py"), steps, "--fresh-runs-on", "--say-every", "20"}, {}, 3));
    }
    return nodes;
  };
  auto first = run("100000");
  // Each copy the agents rename into place is looked at: all three files, at three steps.
  auto apart = [&] {
    const int64_t a = CopiedStep(file(0)), b = CopiedStep(file(1)), c = CopiedStep(file(2));
    return c >= 0 && a > b + 5 && b > c + 5;
  };
  AwaitFiles(dirs, apart, seconds(120));
  for (auto& n : first) ::kill(n->pid(), SIGKILL);
  for (auto& n : first) ASSERT_TRUE(n->Wait(seconds(60)).has_value()) << n->all();
  const std::vector<int64_t> copied = {CopiedStep(file(0)), CopiedStep(file(1)), CopiedStep(file(2))};
  ASSERT_GE(copied[2], 0) << first[0]->all() << first[1]->all() << first[2]->all();
  ASSERT_NE(copied[0], copied[1]);  // what this test is about (a pass between the check and the kill)
  ASSERT_NE(copied[1], copied[2]);
  ASSERT_NE(copied[0], copied[2]);
  const int64_t newest = *std::max_element(copied.begin(), copied.end());
  RecordProperty("copied_steps",
                 std::to_string(copied[0]) + "," + std::to_string(copied[1]) + "," + std::to_string(copied[2]));

  auto second = run("10");  // ends 10 steps after the step it resumes at
  for (auto& n : second) EXPECT_EQ(n->Wait(seconds(120)), 0) << n->all();
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(second[i]->all().find("[default0]:RESTORED step=" + std::to_string(newest)), std::string::npos)
        << "files at " << copied[0] << ", " << copied[1] << ", " << copied[2] << "\n"
        << second[i]->all();
  }
  EXPECT_NE(second[0]->all().find("taking step " + std::to_string(newest) + ", the snapshot completed last"),
            std::string::npos)
      << second[0]->all();
}

}  // namespace
}  // namespace dtrun::testing
