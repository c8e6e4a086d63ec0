// The CUDA path of the worker library and trainer, run for real. Every test skips on a machine
// without a GPU (CI); scripts/gpu-check.sh runs them on one (ctest -L cuda).
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "base/env_names.h"
#include "snapshot/snapshot_region.h"
#include "worker/grad_scaler.h"
#include "worker/memory_snapshot.h"
#include "worker/resnet.h"
#include "worker/sync_stopwatch.h"
#include "worker/torch_compat.h"

namespace dtrun::worker {
namespace {

using dtrun::testing::BinDir;
using dtrun::testing::DtrunBinary;
using dtrun::testing::MakeTempDir;
using dtrun::testing::RunToEnd;

#define SKIP_WITHOUT_CUDA()                                                                     \
  do {                                                                                          \
    if (!DTRUN_WITH_NCCL) GTEST_SKIP() << "LibTorch built without CUDA/NCCL";                   \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";                 \
  } while (0)

// The all-reduce wait on CUDA is GPU time between events on the compute stream, read a step late
// once complete: here the "wait" is a matmul queued between Start and Stop.
TEST(CudaTest, SyncStopwatchReadsTheGpuTimeOfTheLapBeforeWithoutWaitingForIt) {
  SKIP_WITHOUT_CUDA();
  const torch::Tensor a = torch::randn({4096, 4096}, torch::kCUDA);
  SyncStopwatch watch(/*cuda=*/true);
  for (int lap = 0; lap < 3; ++lap) {
    watch.Start();
    for (int i = 0; i < 4; ++i) (void)torch::matmul(a, a);
    watch.Stop();
    if (lap == 0) {
      EXPECT_FALSE(watch.newest().has_value()) << "nothing before the first lap";
    }
    torch::cuda::synchronize();  // the test's own wait: the next Stop finds the lap before complete
  }
  ASSERT_TRUE(watch.newest().has_value());
  EXPECT_EQ(watch.newest()->steps_ago, 1);
  EXPECT_GT(watch.newest()->wait_s, 0.0001) << "four 4096^3 matmuls take some GPU time";
  EXPECT_GE(watch.newest()->step_s, watch.newest()->wait_s);
}

TEST(CudaTest, AutocastRunsMatmulsInTheRequestedPrecisionOnlyInsideTheScope) {
  SKIP_WITHOUT_CUDA();
  torch::Tensor a = torch::randn({64, 64}, torch::kCUDA), b = torch::randn({64, 64}, torch::kCUDA);
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    {
      AutocastScope scope(true, /*cuda=*/true, dtype);
      EXPECT_EQ(torch::mm(a, b).scalar_type(), dtype);
    }
    EXPECT_EQ(torch::mm(a, b).scalar_type(), at::kFloat);
  }
}

TEST(CudaTest, GradScalerFindsOverflowInCudaGradientsAndUnscalesClean) {
  SKIP_WITHOUT_CUDA();
  GradScalerOptions o;
  o.init_scale = 8;
  GradScaler s(o);
  torch::Tensor p = torch::zeros({3}, torch::TensorOptions().device(torch::kCUDA).requires_grad(true));
  p.mutable_grad() = torch::full({3}, 16.0f, torch::kCUDA);
  EXPECT_TRUE(s.UnscaleAndUpdate({p}, nullptr));
  EXPECT_TRUE(torch::allclose(p.grad().cpu(), torch::full({3}, 2.0f)));
  p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 0.0f}, torch::kCUDA);
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(s.UnscaleAndUpdate({p}, nullptr));
  ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(s.scale(), 4.0);
}

// A snapshot of a state on the GPU is copied into its slot on a side stream while the next step
// runs (worker/snapshot_device_copy.h): the next forward moves batch norm's statistics during the
// copy, and the restore still gives the state at Begin, bit for bit.
TEST(CudaTest, ASnapshotOfAStateOnTheGpuIsCopiedAlongsideTheNextStepAndRestoresExactly) {
  SKIP_WITHOUT_CUDA();
  absl::StatusOr<UniqueFd> fd = snapshot::CreateRegion(256 << 20, "cuda-snapshot-test");
  ASSERT_TRUE(fd.ok()) << fd.status();
  setenv(env::kSnapshotFd, std::to_string(fd->get()).c_str(), 1);
  setenv(env::kRunId, "cuda-snapshot-test", 1);
  unsetenv(env::kSnapshotCopy);
  std::unique_ptr<MemorySnapshots> snapshots = MemorySnapshots::FromEnvironment(DistEnv{});
  unsetenv(env::kSnapshotFd);
  ASSERT_NE(snapshots, nullptr);

  torch::manual_seed(3);
  torch::nn::Sequential model{torch::nn::Linear(1024, 4096), torch::nn::BatchNorm1d(4096), torch::nn::Linear(4096, 1024)};
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  Progress progress;
  TrainState state{model.ptr().get(), &optimizer, nullptr, &progress};
  auto step = [&] {
    optimizer.zero_grad();
    model->forward(torch::randn({256, 1024}, torch::kCUDA)).square().mean().backward();
  };
  auto values = [&] {
    std::vector<torch::Tensor> out;
    for (const StateTensor& t : StateTensors(state)) out.push_back(t.tensor.detach().cpu().clone());
    return out;
  };
  step();
  optimizer.step();
  progress.global_step = 1;
  const std::vector<torch::Tensor> at_begin = values();

  ASSERT_TRUE(snapshots->Begin(state).ok());
  EXPECT_TRUE(snapshots->copying()) << "a state on the GPU is copied alongside the next step by default";
  step();  // moves the running statistics while the parameters are being copied
  ASSERT_TRUE(snapshots->Finish());
  optimizer.step();
  torch::cuda::synchronize();
  std::printf("snapshot of %.1f MB from the GPU: %.2f ms in the step, %.2f ms of CPU alongside\n",
              snapshots->last_bytes() / 1e6, 1e3 * snapshots->last_write_seconds(),
              1e3 * snapshots->last_background_seconds());

  ASSERT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{1});
  ASSERT_TRUE(snapshots->Restore(1, state).ok());
  const std::vector<torch::Tensor> restored = values();
  ASSERT_EQ(restored.size(), at_begin.size());
  for (size_t i = 0; i < restored.size(); ++i) EXPECT_TRUE(torch::equal(restored[i], at_begin[i])) << "tensor " << i;
}

// Same weights, same input: the channels-last CUDA forward and backward agree with the CPU's
// (TF32 and cuDNN's algorithms allow small differences).
TEST(CudaTest, ChannelsLastResNetOnCudaMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(0);
  ResNetOptions o;
  o.num_classes = 10;
  ResNet cpu(o);
  ResNet gpu(o);
  {
    torch::NoGradGuard no_grad;
    auto src = cpu->named_parameters(), dst = gpu->named_parameters();
    for (auto& p : src) dst[p.key()].copy_(p.value());
    auto bsrc = cpu->named_buffers(), bdst = gpu->named_buffers();
    for (auto& b : bsrc) bdst[b.key()].copy_(b.value());
  }
  gpu->to(torch::kCUDA);
  torch::Tensor x = torch::randn({4, 3, 64, 64});
  torch::Tensor y_cpu = cpu->forward(x);
  torch::Tensor y_gpu = gpu->forward(x.to(torch::kCUDA).contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::allclose(y_gpu.cpu(), y_cpu, /*rtol=*/2e-2, /*atol=*/2e-2))
      << (y_gpu.cpu() - y_cpu).abs().max().item<float>();
  y_cpu.sum().backward();
  y_gpu.sum().backward();
  torch::Tensor g_cpu = cpu->named_parameters()["fc.weight"].grad();
  torch::Tensor g_gpu = gpu->named_parameters()["fc.weight"].grad().cpu();
  EXPECT_TRUE(torch::allclose(g_gpu, g_cpu, 2e-2, 2e-2)) << (g_gpu - g_cpu).abs().max().item<float>();
}

TEST(CudaTest, NcclAllReduceUnderDtrunOnEveryGpu) {
  SKIP_WITHOUT_CUDA();
  const std::string n = std::to_string(torch::cuda::device_count());
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", n, BinDir() + "/allreduce_check",
                             "--backend", "nccl", "--mb", "64"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ALLREDUCE_OK rank=0 world=" + n), std::string::npos) << out;
  EXPECT_NE(out.find("backend=nccl"), std::string::npos) << out;
}

std::string DemoDataset() {
  static const std::string dir =
      dtrun::testing::MakeDemoDataset({"--train-per-class", "64", "--val-per-class", "16", "--size", "72"});
  return dir;
}

// The whole CUDA training path (pinned non-blocking input copies, channels-last, autocast, the
// loss scaler with fp16, NCCL DDP) learns the demo set far above chance (10%).
void ExpectLearns(const std::string& amp) {
  const std::string n = std::to_string(torch::cuda::device_count());
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", n, BinDir() + "/train_imagenet",
                             DemoDataset(), "--arch", "resnet18", "--amp", amp, "--epochs", "8", "-b", "32", "--lr",
                             "0.02", "--lr-schedule", "cosine", "--warmup-epochs", "1", "--image-size", "64", "-j", "4",
                             "-p", "1000", "--output-dir", MakeTempDir() + "/run"});
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("best val top1 ([0-9.]+)%"))) << out;
  EXPECT_GT(std::stod(m[1]), 30.0) << out;
}

TEST(CudaTest, TrainingWithFp16AndTheLossScalerLearns) {
  SKIP_WITHOUT_CUDA();
  ExpectLearns("fp16");
}

TEST(CudaTest, TrainingWithBf16Learns) {
  SKIP_WITHOUT_CUDA();
  ExpectLearns("bf16");
}

// A Python worker's init_process_group("nccl") under dtrun: the environment dtrun gives is
// everything NCCL needs.
TEST(CudaTest, PythonNcclWorkerUnderDtrun) {
  SKIP_WITHOUT_CUDA();
  std::optional<std::string> py = dtrun::testing::TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (set PYTHON_EXEC)";
  const std::string n = std::to_string(torch::cuda::device_count());
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", n, "--no-python", *py,
                             dtrun::testing::SourceDir() + "/bench/gpu/nccl_init.py"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("NCCL_OK rank=0 world=" + n), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::worker
