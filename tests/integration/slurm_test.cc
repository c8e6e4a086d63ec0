// dtrun under a real Slurm (slurmctld, slurmd and munge from Debian, on namespace hosts): srun
// starts one dtrun per node and dtrun takes the rest from the job. The nodes run the Debian
// package's programs (found on PATH, as on a cluster where it is installed), not the build tree's.
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <regex>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/support/packaged_tree.h"
#include "tests/support/process_harness.h"
#include "tests/support/slurm_cluster.h"

namespace dtrun::testing {
namespace {

// A batch job's output file as it grows: the only channel to a job sbatch started. Waits on its
// changes (inotify), bounded.
class JobLog {
 public:
  JobLog(const std::string& dir, const std::string& id)
      : file_(dir + "/job-" + id + ".out"), changes_(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    ::inotify_add_watch(changes_.get(), dir.c_str(), IN_MODIFY | IN_CREATE);
  }
  std::string Text() const { return ReadText(file_); }
  // Whether `needle` appeared within `limit` of the log's creation (one deadline for every wait).
  bool WaitFor(const std::string& needle) {
    for (;;) {
      if (Text().find(needle) != std::string::npos) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{changes_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) > 0) {
        char buf[4096];
        while (::read(changes_.get(), buf, sizeof(buf)) > 0) {
        }
      }
    }
  }

 private:
  const std::string file_;
  UniqueFd changes_;
  const std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(180);
};

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = SlurmCluster::Unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    if (!TorchPython()) GTEST_SKIP() << "no Python with torch";
    absl::StatusOr<std::string> prefix = PackagedPrefix();
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    path_ = PathWithPackage(*prefix);
    slurm_ = std::make_unique<SlurmCluster>(2);
    ASSERT_TRUE(slurm_->ok()) << slurm_->error();
  }
  std::pair<int, std::string> Srun(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/srun");
    return slurm_->Run(args, {{"PYTHON_EXEC", *TorchPython()}, {"PATH", path_}});
  }
  std::unique_ptr<SlurmCluster> slurm_;
  std::string path_;  // the package's bin/ first
};

TEST_F(SlurmTest, SrunDtrunFormsAGlooJobAcrossTwoNodesFromTheJobsVariables) {
  auto [rc, out] = Srun({"-N2", "--ntasks-per-node=1", "dtrun", "--nproc-per-node", "2", Worker("gloo_allreduce.py")});
  ASSERT_EQ(rc, 0) << out;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(out.find("ALLREDUCE_OK rank=" + std::to_string(rank) + " world=4"), std::string::npos) << out;
  }
  EXPECT_NE(out.find(": --nnodes 2 (SLURM_STEP_NUM_NODES), --node-rank "), std::string::npos) << out;
  EXPECT_NE(out.find("--master-addr n0 (the first host of SLURM_STEP_NODELIST)"), std::string::npos) << out;
  // Each node's leaf switch is its failure domain: buddy copies go to the node under the other one.
  for (const char* leaf : {"leaf0", "leaf1"}) {
    EXPECT_NE(out.find(absl::StrCat("--failure-domain ", leaf, " (the leaf switch in SLURM_TOPOLOGY_ADDR)")),
              std::string::npos)
        << out;
  }
}

// examples/slurm/train_imagenet.sbatch as a user submits it: train_imagenet on the demo dataset
// across both nodes (one worker each: no GPUs, one task per node), 240 images / 2 ranks / 16 = 8
// steps per epoch. Run with --wait, then with a preemption warning (scancel --signal=USR1) after a
// few steps: the workers checkpoint, the script requeues the job, and the second run resumes with
// exactly the planned 16 optimizer steps.
class SlurmTrainingTest : public SlurmTest {
 protected:
  void SetUp() override {
    SlurmTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (::access((BinDir() + "/train_imagenet").c_str(), X_OK) != 0) GTEST_SKIP() << "built without LibTorch";
    ASSERT_TRUE(std::filesystem::exists(*PackagedPrefix() + "/bin/train_imagenet"));
    data_ = MakeDemoDataset({"--train-per-class", "24", "--val-per-class", "8", "--size", "64"});
    out_ = slurm_->dir() + "/run";
  }
  // sbatch of the example with `flags`; the script finds dtrun and train_imagenet on PATH.
  std::pair<int, std::string> Sbatch(std::vector<std::string> flags) {
    std::vector<std::string> argv = {"/usr/bin/sbatch", "--parsable", "--output=" + slurm_->dir() + "/job-%j.out"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {std::string(DTRUN_SOURCE_DIR) + "/examples/slurm/train_imagenet.sbatch", data_, out_, "-b",
                             "16", "--lr", "0.02", "--image-size", "64", "-j", "1", "--epochs", "2", "-p", "1",
                             "--save-every-minutes", "1000"});
    return slurm_->Run(argv, {{"PATH", path_}});
  }
  std::string data_, out_;
};

TEST_F(SlurmTrainingTest, TheExampleScriptTrainsAcrossTwoNodes) {
  auto [rc, id] = Sbatch({"--wait"});
  const std::string log = ReadText(slurm_->dir() + "/job-" + id.substr(0, id.find_first_of(";\n")) + ".out");
  ASSERT_EQ(rc, 0) << id << log;
  EXPECT_NE(log.find("--nnodes 2 (SLURM_STEP_NUM_NODES)"), std::string::npos) << log;
  EXPECT_NE(log.find("16 optimizer steps"), std::string::npos) << log;
  EXPECT_NE(log.find("best val top1"), std::string::npos) << log;
}

TEST_F(SlurmTrainingTest, APreemptionWarningCheckpointsRequeuesAndResumesExactly) {
  auto [rc, out] = Sbatch({});
  ASSERT_EQ(rc, 0) << out;
  const std::string id = out.substr(0, out.find_first_of(";\n"));
  JobLog log(slurm_->dir(), id);
  ASSERT_TRUE(log.WaitFor("Epoch: [0][3/8]")) << log.Text();
  EXPECT_EQ(slurm_->Run({"/usr/bin/scancel", "--signal=USR1", id}).first, 0);
  ASSERT_TRUE(log.WaitFor("requeueing job " + id)) << log.Text();
  ASSERT_TRUE(log.WaitFor("16 optimizer steps")) << log.Text() << slurm_->Run({"/usr/bin/scontrol", "show", "job", id}).second
                                                 << slurm_->Run({"/usr/bin/sinfo"}).second;
  const std::string text = log.Text();
  EXPECT_NE(text.find("stop requested (User defined signal 1): checkpoint written at epoch 0"), std::string::npos) << text;
  EXPECT_NE(text.find("resuming from"), std::string::npos) << text;
}

// The values of `pattern`'s first group in `text`, in order.
std::vector<std::string> AllMatches(const std::string& text, const std::string& pattern) {
  std::vector<std::string> found;
  const std::regex re(pattern);
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) found.push_back((*it)[1]);
  return found;
}

// examples/slurm/python_snapshots.sbatch with a Python DDP script that calls dtrun.snapshot() every
// step (written every 50th) and nothing else of dtrun's, one rank per node. Slurm requeues the
// running job (as a preemption with PreemptMode=REQUEUE does): SIGTERM to each node's dtrun, the
// ranks keep their last step on the way out, each agent keeps its rank in the shared directory,
// and the job Slurm starts again resumes there, ending with the parameters of a run never
// stopped. Its success removes the files.
TEST_F(SlurmTest, APythonJobRequeuedBySlurmResumesFromTheSnapshotsItKept) {
  constexpr int kMoreSteps = 20;
  const std::string kept = slurm_->dir() + "/kept";
  auto [rc, out] = slurm_->Run(
      {"/usr/bin/sbatch", "--parsable", "--output=" + slurm_->dir() + "/job-%j.out",
       std::string(DTRUN_SOURCE_DIR) + "/examples/slurm/python_snapshots.sbatch", kept, "--snapshot-every", "50",
       Worker("snapshot_resume.py"), std::to_string(kMoreSteps), "--fresh-runs-on", "--say-every", "20", "--no-heartbeat"},
      {{"PYTHON_EXEC", *TorchPython()}, {"PATH", path_}});
  ASSERT_EQ(rc, 0) << out;
  const std::string id = out.substr(0, out.find_first_of(";\n"));
  JobLog log(slurm_->dir(), id);
  ASSERT_TRUE(log.WaitFor("STEP 120")) << log.Text();
  const int said = std::stoi(AllMatches(log.Text(), R"(STEP (\d+))").back());  // past 100, the last periodic snapshot
  EXPECT_EQ(slurm_->Run({"/usr/bin/scontrol", "requeue", id}).first, 0);
  ASSERT_TRUE(log.WaitFor("DIGEST rank=1")) << log.Text() << slurm_->Run({"/usr/bin/scontrol", "show", "job", id}).second;
  ASSERT_TRUE(log.WaitFor("DIGEST rank=0")) << log.Text();
  const std::string text = log.Text();
  EXPECT_EQ(AllMatches(text, R"((\[dtrun\] loaded 1 rank's snapshots))").size(), 2u) << text;  // one per node
  const std::vector<std::string> restored = AllMatches(text, R"(RESTORED step=(\d+))");
  ASSERT_EQ(restored.size(), 2u) << text;
  EXPECT_EQ(restored[0], restored[1]) << text;
  const int resumed_at = std::stoi(restored[0]);
  EXPECT_GE(resumed_at, said) << text;  // not the last periodic snapshot: the step it was stopped at

  auto [clean_rc, clean] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2",
                                     Worker("snapshot_resume.py"), std::to_string(resumed_at + kMoreSteps)},
                                    {{"PYTHON_EXEC", *TorchPython()}, {"DTRUN_RUNTIME_DIR", MakeTempDir()}});
  ASSERT_EQ(clean_rc, 0) << clean;
  const std::vector<std::string> digests = AllMatches(text, R"(DIGEST rank=\d ([0-9a-f]{16}))");
  const std::vector<std::string> never_stopped = AllMatches(clean, R"(DIGEST rank=\d ([0-9a-f]{16}))");
  ASSERT_EQ(digests.size(), 2u) << text;
  ASSERT_EQ(never_stopped.size(), 2u) << clean;
  EXPECT_EQ(digests[0], never_stopped[0]) << text << clean;
  EXPECT_EQ(digests[1], never_stopped[0]) << text << clean;
  EXPECT_TRUE(std::filesystem::is_empty(kept)) << text;
}

TEST_F(SlurmTest, SeveralDtrunTasksOnANodeAreRefusedWithTheFix) {
  auto [rc, out] = Srun({"-N1", "--ntasks-per-node=2", "dtrun", "/bin/true"});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("srun started 2 dtrun tasks on n0"), std::string::npos) << out;
  EXPECT_NE(out.find("srun --ntasks-per-node=1 dtrun"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing
