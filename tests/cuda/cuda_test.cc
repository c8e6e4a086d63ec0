// The CUDA path of the worker library and trainer, run for real. Every test skips on a machine
// without a GPU (CI); scripts/gpu-check.sh runs them on one (ctest -L cuda).
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/worker/data/data_test_util.h"
#include "tests/worker/resize_check.h"
#include "base/env_names.h"
#include "snapshot/snapshot_region.h"
#include "worker/batch_norm_relu.h"
#include "worker/cudnn_batch_norm_relu.h"
#include "worker/data/decode.h"
#include "worker/data/transforms.h"
#include "worker/device_batch.h"
#include "worker/device_step.h"
#include "worker/foreach_sgd.h"
#include "worker/grad_scaler.h"
#include "worker/memory_snapshot.h"
#include "worker/nvjpeg_decoder.h"
#include "worker/resnet.h"
#include "worker/sync_stopwatch.h"
#include "worker/torch_compat.h"

#if DTRUN_WITH_NCCL
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#endif

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

// The step without host syncs, captured as a CUDA graph and replayed, moves the weights exactly as
// the same step queued kernel by kernel; an overflow inside the graph skips the update and backs
// the scale off, all on the device.
struct TinyTrainer {
  torch::nn::Sequential model{torch::nn::Linear(64, 256), torch::nn::ReLU(), torch::nn::Linear(256, 10)};
  std::unique_ptr<ForeachSgd> sgd;
  GradScaler scaler;
  torch::Tensor lr = torch::full({1}, 0.05f, torch::kCUDA);

  explicit TinyTrainer(double init_scale) : scaler(GradScalerOptions{true, init_scale, 2.0, 0.5, 3}) {
    torch::manual_seed(7);
    model = torch::nn::Sequential{torch::nn::Linear(64, 256), torch::nn::ReLU(), torch::nn::Linear(256, 10)};
    model->to(torch::kCUDA);
    sgd = std::make_unique<ForeachSgd>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
    scaler.KeepStateOn(torch::kCUDA);
  }
  // The trainer's step body in small: returns the loss (float [1]).
  torch::Tensor Step(const torch::Tensor& x, const torch::Tensor& y) {
    torch::Tensor loss;
    {
      AutocastScope autocast(true, /*cuda=*/true, at::kHalf);
      loss = torch::nn::functional::cross_entropy(model->forward(x).to(torch::kFloat32), y);
    }
    scaler.ScaleOnDevice(loss).backward();
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : model->parameters()) grads.push_back(p.grad());
    torch::Tensor found_inf = scaler.UnscaleOnDevice(grads);
    sgd->StepOnDevice(lr, found_inf);
    scaler.UpdateOnDevice();
    return loss.detach().reshape({1});
  }
  std::vector<torch::Tensor> Weights() {
    std::vector<torch::Tensor> w;
    for (const torch::Tensor& p : model->parameters()) w.push_back(p.detach().cpu().clone());
    return w;
  }
};

TEST(CudaTest, ACapturedStepReplaysAsTheEagerStepRuns) {
  SKIP_WITHOUT_CUDA();
  if (!StepGraph::Supported()) GTEST_SKIP() << "this LibTorch cannot capture the step (older than 2.4)";
  torch::manual_seed(1);
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(torch::randn({32, 64}, torch::kCUDA));
    ys.push_back(torch::randint(0, 10, {32}, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA)));
  }
  TinyTrainer eager(1024), graphed(1024);
  for (int i = 0; i < 8; ++i) {
    for (torch::Tensor& p : eager.model->parameters()) p.mutable_grad() = torch::Tensor();
    eager.Step(xs[i], ys[i]);
  }
  for (int i = 0; i < 3; ++i) {  // eager warm-up, as the trainer does
    for (torch::Tensor& p : graphed.model->parameters()) p.mutable_grad() = torch::Tensor();
    graphed.Step(xs[i], ys[i]);
  }
  const std::vector<torch::Tensor> before = graphed.Weights();
  torch::Tensor x = torch::empty_like(xs[0]), y = torch::empty_like(ys[0]);
  for (torch::Tensor& p : graphed.model->parameters()) p.mutable_grad() = torch::Tensor();
  StepGraph graph;
  graph.Capture([&] { return std::vector<torch::Tensor>{graphed.Step(x, y)}; });
  EXPECT_TRUE(torch::equal(graphed.Weights()[0], before[0])) << "capturing runs nothing";
  LaggedReadback losses;
  for (int i = 3; i < 8; ++i) {
    x.copy_(xs[i]);
    y.copy_(ys[i]);
    graph.Replay();
    losses.Push(graph.outputs()[0], i);
  }
  const std::vector<LaggedReadback::Values> read = losses.Take(/*all=*/true);
  ASSERT_EQ(read.size(), 5u);
  EXPECT_EQ(read.front().tag, 3);
  EXPECT_TRUE(std::isfinite(read.back().values[0])) << read.back().values[0];
  const std::vector<torch::Tensor> a = eager.Weights(), b = graphed.Weights();
  EXPECT_FALSE(torch::equal(b[0], before[0])) << "the replays trained";
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i << ": " << (a[i] - b[i]).abs().max().item<float>();
  }
  EXPECT_EQ(eager.scaler.scale(), graphed.scaler.scale());
  EXPECT_EQ(eager.scaler.scale(), 4096.0) << "grew twice: every 3 clean steps (growth interval 3)";
}

TEST(CudaTest, AnOverflowInsideTheGraphSkipsTheUpdateAndBacksOffTheScale) {
  SKIP_WITHOUT_CUDA();
  if (!StepGraph::Supported()) GTEST_SKIP() << "this LibTorch cannot capture the step (older than 2.4)";
  TinyTrainer t(1024);
  torch::Tensor x = torch::randn({32, 64}, torch::kCUDA);
  torch::Tensor y = torch::randint(0, 10, {32}, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA));
  t.Step(x, y);  // makes the momentum buffers
  for (torch::Tensor& p : t.model->parameters()) p.mutable_grad() = torch::Tensor();
  StepGraph graph;
  graph.Capture([&] { return std::vector<torch::Tensor>{t.Step(x, y)}; });
  const std::vector<torch::Tensor> before = t.Weights();
  x.fill_(std::numeric_limits<float>::infinity());  // fp16 activations overflow: the gradients too
  graph.Replay();
  const std::vector<torch::Tensor> after = t.Weights();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i])) << "parameter " << i;
  EXPECT_EQ(t.scaler.scale(), 512.0);
  x.normal_();
  graph.Replay();
  EXPECT_FALSE(torch::equal(t.Weights()[0], before[0])) << "a clean step updates again";
}

// cuDNN's fused batch norm + add + ReLU gives what the three separate operations give: output,
// running statistics, and the gradients of the input, the affine parameters and the residual.
TEST(CudaTest, CudnnFusedBatchNormAddReluMatchesTheSeparateOperations) {
  SKIP_WITHOUT_CUDA();
  if (!CudnnBatchNormReluBuilt()) GTEST_SKIP() << "built without cuDNN's header and library";
  for (const bool add : {false, true}) {
    torch::manual_seed(5);
    const auto half_cl = [](torch::Tensor t) {
      return t.to(torch::kCUDA, torch::kHalf).contiguous(torch::MemoryFormat::ChannelsLast);
    };
    const torch::Tensor x0 = half_cl(torch::randn({16, 64, 14, 14}));
    const torch::Tensor r0 = add ? half_cl(torch::randn({16, 64, 14, 14})) : torch::Tensor();
    const torch::Tensor dy = half_cl(torch::randn({16, 64, 14, 14}));
    torch::nn::BatchNorm2d bns[2] = {torch::nn::BatchNorm2d(64), torch::nn::BatchNorm2d(64)};
    torch::Tensor y[2], dx[2], dr[2];
    for (int fused = 0; fused < 2; ++fused) {
      torch::nn::BatchNorm2d& bn = bns[fused];
      bn->to(torch::kCUDA);
      {
        torch::NoGradGuard no_grad;
        bn->weight.uniform_(0.5, 1.5);
        bn->bias.uniform_(-0.5, 0.5);
      }
      torch::Tensor x = x0.detach().clone().requires_grad_(true);
      torch::Tensor r = add ? r0.detach().clone().requires_grad_(true) : torch::Tensor();
      NormalizationMode mode;
      mode.cudnn = fused == 1;
      ASSERT_EQ(CudnnBatchNormReluApplies(bn, x, r), true);
      y[fused] = BatchNormAddRelu(bn, x, r, mode);
      y[fused].backward(dy);
      dx[fused] = x.grad().to(torch::kFloat32).cpu();
      if (add) dr[fused] = r.grad().to(torch::kFloat32).cpu();
    }
    const auto close = [](const torch::Tensor& a, const torch::Tensor& b) {
      return torch::allclose(a.to(torch::kFloat32).cpu(), b.to(torch::kFloat32).cpu(), /*rtol=*/2e-2, /*atol=*/2e-2);
    };
    EXPECT_TRUE(close(y[1], y[0])) << "add " << add << ": " << (y[1].to(torch::kFloat32) - y[0].to(torch::kFloat32)).abs().max().item<float>();
    EXPECT_TRUE(close(dx[1], dx[0])) << (dx[1] - dx[0]).abs().max().item<float>();
    if (add) {
      EXPECT_TRUE(close(dr[1], dr[0])) << (dr[1] - dr[0]).abs().max().item<float>();
    }
    EXPECT_TRUE(close(bns[1]->weight.grad(), bns[0]->weight.grad()));
    EXPECT_TRUE(close(bns[1]->bias.grad(), bns[0]->bias.grad()));
    EXPECT_TRUE(close(bns[1]->running_mean, bns[0]->running_mean));
    EXPECT_TRUE(close(bns[1]->running_var, bns[0]->running_var));
    EXPECT_EQ(bns[1]->num_batches_tracked.item<int64_t>(), 1);
  }
}

// In-memory snapshots into a region of their own, as under dtrun, in the default copy mode.
struct TestSnapshots {
  absl::StatusOr<UniqueFd> fd;
  std::unique_ptr<MemorySnapshots> snapshots;

  explicit TestSnapshots(const char* run_id) : fd(snapshot::CreateRegion(256 << 20, run_id)) {
    if (!fd.ok()) return;
    setenv(env::kSnapshotFd, std::to_string(fd->get()).c_str(), 1);
    setenv(env::kRunId, run_id, 1);
    unsetenv(env::kSnapshotCopy);
    snapshots = MemorySnapshots::FromEnvironment(DistEnv{});
    unsetenv(env::kSnapshotFd);
  }
};

// A state on the GPU for the snapshot tests: linear, batch norm (running statistics that forward
// moves), linear, and SGD with momentum.
struct GpuStateJob {
  static torch::nn::Sequential OnGpu(torch::nn::Sequential m) {
    m->to(torch::kCUDA);
    return m;
  }
  GpuStateJob(int64_t width, int64_t hidden)
      : width(width),
        model(OnGpu(torch::nn::Sequential{torch::nn::Linear(width, hidden), torch::nn::BatchNorm1d(hidden),
                                          torch::nn::Linear(hidden, width)})),
        optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)) {}

  void Backward(int64_t batch) {
    optimizer.zero_grad();
    model->forward(torch::randn({batch, width}, torch::kCUDA)).square().mean().backward();
  }
  std::vector<torch::Tensor> Values() {
    std::vector<torch::Tensor> out;
    for (const StateTensor& t : StateTensors(state)) out.push_back(t.tensor.detach().cpu().clone());
    return out;
  }
  void ExpectValues(const std::vector<torch::Tensor>& expected) {
    const std::vector<torch::Tensor> now = Values();
    ASSERT_EQ(now.size(), expected.size());
    for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i], expected[i])) << "tensor " << i;
  }

  const int64_t width;
  torch::nn::Sequential model;
  torch::optim::SGD optimizer;
  Progress progress;
  TrainState state{model.ptr().get(), &optimizer, nullptr, &progress};
};

// A snapshot of a state on the GPU is copied into its slot on a side stream while the next step
// runs (worker/snapshot_device_copy.h): the next forward moves batch norm's statistics during the
// copy, and the restore still gives the state at Begin, bit for bit.
TEST(CudaTest, ASnapshotOfAStateOnTheGpuIsCopiedAlongsideTheNextStepAndRestoresExactly) {
  SKIP_WITHOUT_CUDA();
  TestSnapshots region("cuda-snapshot-test");
  ASSERT_TRUE(region.fd.ok()) << region.fd.status();
  ASSERT_NE(region.snapshots, nullptr);
  MemorySnapshots* snapshots = region.snapshots.get();

  torch::manual_seed(3);
  GpuStateJob job(1024, 4096);
  job.Backward(256);
  job.optimizer.step();
  job.progress.global_step = 1;
  const std::vector<torch::Tensor> at_begin = job.Values();

  ASSERT_TRUE(snapshots->Begin(job.state).ok());
  EXPECT_TRUE(snapshots->copying()) << "a state on the GPU is copied alongside the next step by default";
  job.Backward(256);  // moves the running statistics while the parameters are being copied
  ASSERT_TRUE(snapshots->Finish());
  job.optimizer.step();
  torch::cuda::synchronize();
  std::printf("snapshot of %.1f MB from the GPU: %.2f ms in the step, %.2f ms of CPU alongside\n",
              snapshots->last_bytes() / 1e6, 1e3 * snapshots->last_write_seconds(),
              1e3 * snapshots->last_background_seconds());

  ASSERT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{1});
  ASSERT_TRUE(snapshots->Restore(1, job.state).ok());
  job.ExpectValues(at_begin);
}

// The captured step's way: the next optimizer step is queued at once, the GPU waiting for the
// snapshot's copies (MemorySnapshots::OrderAfterCopies), and the host finishes the snapshot later.
// Updates queued right after must not reach the copy.
TEST(CudaTest, ASnapshotOrderedBeforeTheNextStepOnTheGpuKeepsTheStateItBeganWith) {
  SKIP_WITHOUT_CUDA();
  TestSnapshots region("cuda-snapshot-order-test");
  ASSERT_TRUE(region.fd.ok()) << region.fd.status();
  ASSERT_NE(region.snapshots, nullptr);
  MemorySnapshots* snapshots = region.snapshots.get();

  torch::manual_seed(4);
  GpuStateJob job(2048, 4096);
  auto step = [&] {
    job.Backward(512);
    job.optimizer.step();
  };
  step();
  job.progress.global_step = 1;
  const std::vector<torch::Tensor> at_begin = job.Values();

  ASSERT_TRUE(snapshots->Begin(job.state).ok());
  ASSERT_TRUE(snapshots->OrderAfterCopies()) << "a state on the GPU, copied by the GPU";
  for (int i = 0; i < 3; ++i) step();  // queued at once: the GPU holds them until the copies are done
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : job.model->parameters()) p.add_(1.0);
  ASSERT_TRUE(snapshots->Finish());
  torch::cuda::synchronize();
  EXPECT_FALSE(snapshots->copy_done());  // nothing pending after Finish
  std::printf("snapshot of %.1f MB from the GPU, ordered on the GPU: %.2f ms counted against the step\n",
              snapshots->last_bytes() / 1e6, 1e3 * snapshots->last_write_seconds());

  ASSERT_TRUE(snapshots->Restore(1, job.state).ok());
  job.ExpectValues(at_begin);
}

// Keeps the current stream busy for about `seconds` (a spinning kernel, calibrated with events):
// what a stream stuck behind a collective with a rank that is gone looks like, but it ends.
void StallCurrentStream(double seconds) {
#if DTRUN_WITH_NCCL
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  constexpr int64_t kProbe = 100'000'000;
  start.record(stream);
  at::cuda::sleep(kProbe);
  stop.record(stream);
  stop.synchronize();
  const double cycles_per_s = kProbe / (start.elapsed_time(stop) / 1e3);
  at::cuda::sleep(static_cast<int64_t>(seconds * cycles_per_s));
#else
  (void)seconds;
#endif
}

// Snapshots on failure with the state on the GPU (MemorySnapshots::Arm, DeviceMark): the state
// armed after a step is kept on the way out though the current stream is stuck (as behind a
// collective with a rank that is gone) and the next forward, queued behind it, moves the batch
// norm statistics. A rescue queued after the current stream's work would wait out the whole stall
// and miss its bound; the rescue copies after the armed step's mark alone.
TEST(CudaTest, AStateOnTheGpuIsKeptOnTheWayOutThoughTheCurrentStreamIsStuck) {
  SKIP_WITHOUT_CUDA();
  TestSnapshots region("cuda-rescue-test");
  ASSERT_TRUE(region.fd.ok()) << region.fd.status();
  ASSERT_NE(region.snapshots, nullptr);
  MemorySnapshots* snapshots = region.snapshots.get();
  snapshots->set_rescue_wait_seconds(1);

  torch::manual_seed(5);
  GpuStateJob job(1024, 4096);
  GradScaler scaler;
  scaler.KeepStateOn(torch::kCUDA);  // the captured step's loss scale, on the GPU
  job.state.scaler = &scaler;
  job.Backward(256);
  job.optimizer.step();
  job.progress.global_step = 1;
  const std::vector<torch::Tensor> at_arm = job.Values();

  snapshots->Arm(job.state);
  ASSERT_TRUE(snapshots->armed()) << "a state on the GPU is armed";
  StallCurrentStream(3);
  job.Backward(256);  // queued behind the stall: moves the running statistics after the mark
  int64_t written = -2;
  std::thread([&] { written = snapshots->Rescue(); }).join();
  EXPECT_EQ(written, 1) << "the rescue waited for the stuck stream, not for the armed step's mark";

  torch::cuda::synchronize();
  ASSERT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{1});
  scaler.SetState(1.0, 0);
  ASSERT_TRUE(snapshots->Restore(1, job.state).ok());
  job.ExpectValues(at_arm);
  EXPECT_EQ(scaler.scale(), GradScalerOptions{}.init_scale);
}

// A periodic snapshot of the armed step, copied alongside the next step (the default on the GPU),
// commits only at that step's end, which a rank blocked in the step's collective never reaches.
// The rescue finishes it: its copies were ordered after the optimizer step, not after the stall
// that stands for the stuck collective, so they are done, and the armed step is kept.
TEST(CudaTest, ASnapshotStillBeingCopiedIsFinishedAndKeptOnTheWayOut) {
  SKIP_WITHOUT_CUDA();
  TestSnapshots region("cuda-rescue-pending-test");
  ASSERT_TRUE(region.fd.ok()) << region.fd.status();
  ASSERT_NE(region.snapshots, nullptr);
  MemorySnapshots* snapshots = region.snapshots.get();
  snapshots->set_rescue_wait_seconds(2);

  torch::manual_seed(7);
  GpuStateJob job(1024, 4096);
  job.Backward(256);
  job.optimizer.step();
  job.progress.global_step = 1;
  const std::vector<torch::Tensor> at_arm = job.Values();
  snapshots->Arm(job.state);
  ASSERT_TRUE(snapshots->Begin(job.state).ok());
  StallCurrentStream(4);
  job.Backward(256);  // the next step, stuck behind the stall
  int64_t written = -2;
  std::thread([&] { written = snapshots->Rescue(); }).join();
  EXPECT_EQ(written, 1);

  torch::cuda::synchronize();
  snapshots->Disarm();
  snapshots->Finish();
  ASSERT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{1});
  ASSERT_TRUE(snapshots->Restore(1, job.state).ok());
  job.ExpectValues(at_arm);
}

// The GPU never reaches the armed step (stuck before its end, as in a step's own all-reduce with a
// rank that died in it): the state armed never existed whole on the GPU, and the rescue gives up
// within its bound, keeping nothing.
TEST(CudaTest, ARescueGivesUpWhenTheGpuDoesNotReachTheArmedStepInTime) {
  SKIP_WITHOUT_CUDA();
  TestSnapshots region("cuda-rescue-timeout-test");
  ASSERT_TRUE(region.fd.ok()) << region.fd.status();
  ASSERT_NE(region.snapshots, nullptr);
  MemorySnapshots* snapshots = region.snapshots.get();
  snapshots->set_rescue_wait_seconds(0.3);

  torch::manual_seed(6);
  GpuStateJob job(1024, 4096);
  StallCurrentStream(2);
  job.Backward(256);
  job.optimizer.step();  // queued behind the stall
  job.progress.global_step = 1;
  snapshots->Arm(job.state);
  EXPECT_EQ(snapshots->Rescue(), -1);
  torch::cuda::synchronize();
  EXPECT_TRUE(snapshots->UsableSteps().empty());
}

// The same for a Python script (dtrun.snapshot, python/dtrun/_on_failure.py): SIGTERM while its
// GPU is stuck keeps the state of its last snapshot() call, copied after that step's mark within a
// 1 s bound, and the restart resumes from it, on the GPU, with the same values.
TEST(CudaTest, APythonScriptsStateOnTheGpuIsKeptOnTheWayOutAndResumed) {
  SKIP_WITHOUT_CUDA();
  std::optional<std::string> py = dtrun::testing::TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (set PYTHON_EXEC)";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "--max-restarts", "1",
                             "--snapshot-every", "1000", dtrun::testing::Worker("gpu_rescue.py")},
                            {{"PYTHON_EXEC", *py}});
  ASSERT_EQ(rc, 0) << out;
  std::smatch armed;
  ASSERT_TRUE(std::regex_search(out, armed, std::regex(R"(ARMED step=5 digest=([0-9a-f]{16}))"))) << out;
  EXPECT_NE(out.find("rank 0: kept the state of step 5 in memory on the way out"), std::string::npos) << out;
  EXPECT_NE(out.find("RESTORED step=5 digest=" + armed[1].str() + " device=cuda:0"), std::string::npos) << out;
  EXPECT_EQ(out.find("NOT STOPPED"), std::string::npos) << out;
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
      // 600 training images: 18 batches of 32 and a last one of 24, which runs eagerly next to the graph.
      dtrun::testing::MakeDemoDataset({"--train-per-class", "60", "--val-per-class", "16", "--size", "72"});
  return dir;
}

// The whole CUDA training path (pinned non-blocking input copies, channels-last, autocast, the
// loss scaler with fp16, NCCL DDP; on one GPU the step without host syncs, captured as a CUDA
// graph unless --no-cuda-graphs) learns the demo set far above chance (10%).
std::string ExpectLearns(const std::string& amp, bool graphs = true, const std::vector<std::string>& extra = {}) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  const std::string n = std::to_string(gpus);
  std::vector<std::string> cmd{DtrunBinary(), "--standalone", "--nproc-per-node", n, BinDir() + "/train_imagenet",
                               DemoDataset(), "--arch", "resnet18", "--amp", amp, "--epochs", "8", "-b", "32", "--lr",
                               "0.02", "--lr-schedule", "cosine", "--warmup-epochs", "1", "--image-size", "64", "-j", "4",
                               "-p", "1000", "--output-dir", MakeTempDir() + "/run"};
  if (!graphs) cmd.push_back("--no-cuda-graphs");
  cmd.insert(cmd.end(), extra.begin(), extra.end());
  auto [rc, out] = RunToEnd(cmd);
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) return out;
  if (gpus == 1 && StepGraph::Supported()) {
    EXPECT_NE(out.find("without host syncs"), std::string::npos) << out;
    EXPECT_EQ(out.find("is captured and replayed") != std::string::npos, graphs) << out;
  }
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex("best val top1 ([0-9.]+)%"))) << out;
  if (!m.empty()) {
    EXPECT_GT(std::stod(m[1]), 30.0) << out;
  }
  return out;
}

TEST(CudaTest, TrainingWithFp16AndTheLossScalerLearns) {
  SKIP_WITHOUT_CUDA();
  ExpectLearns("fp16");
}

TEST(CudaTest, TrainingWithBf16Learns) {
  SKIP_WITHOUT_CUDA();
  ExpectLearns("bf16");
}

TEST(CudaTest, TrainingWithoutCudaGraphsLearns) {
  SKIP_WITHOUT_CUDA();
  ExpectLearns("fp16", /*graphs=*/false);
}

// The loader hands the JPEGs on; nvJPEG decodes them on the GPU, where they are cropped and resized.
TEST(CudaTest, TrainingWithJpegsDecodedOnTheGpuLearns) {
  SKIP_WITHOUT_CUDA();
  if (!NvJpegBuilt()) GTEST_SKIP() << "built without nvJPEG (no nvjpeg.h or libnvjpeg found)";
  const std::string out = ExpectLearns("fp16", /*graphs=*/true, {"--gpu-decode"});
  EXPECT_NE(out.find("JPEGs decoded on the GPU by nvJPEG"), std::string::npos) << out;
  // How many the GPU took (the hardware engines may leave small images to the host): for the log.
  std::smatch m;
  if (std::regex_search(out, m, std::regex("JPEGs: [0-9]+ decoded on the GPU[^\n]*"))) {
    std::printf("%s\n", m.str().c_str());
  }
}

// nvJPEG's images are TurboJPEG's within IDCT and chroma-upsampling differences; a truncated one in the batch neither crashes nor spoils the others' results.
TEST(CudaTest, NvJpegDecodesABatchAsTurboJpegDoes) {
  SKIP_WITHOUT_CUDA();
  if (!NvJpegBuilt()) GTEST_SKIP() << "built without nvJPEG (no nvjpeg.h or libnvjpeg found)";
  absl::StatusOr<std::unique_ptr<JpegBatchDecoder>> nv = MakeNvJpegDecoder(torch::Device(torch::kCUDA, 0));
  ASSERT_TRUE(nv.ok()) << nv.status();
  std::printf("decoder: %s\n", (*nv)->Describe().c_str());
  std::vector<std::string> jpegs;
  for (auto [w, h] : {std::pair{500, 375}, std::pair{333, 500}, std::pair{64, 48}, std::pair{1023, 767}}) {
    jpegs.push_back(data::testing::SmoothJpeg(w, h));
  }
  std::vector<std::string_view> views(jpegs.begin(), jpegs.end());
  absl::StatusOr<std::vector<torch::Tensor>> got = (*nv)->Decode(views);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), jpegs.size());
  data::Decoder host;
  int decoded = 0;
  for (size_t i = 0; i < jpegs.size(); ++i) {
    auto info = host.Info(jpegs[i]);
    ASSERT_TRUE(info.ok());
    auto want = host.Decode(jpegs[i], data::Box{0, 0, double(info->width), double(info->height)}, info->width,
                            info->height);
    ASSERT_TRUE(want.ok());
    if (!(*got)[i].defined()) {  // left to the host (the hardware engines have a minimum size)
      std::printf("image %zu (%dx%d): not taken by nvJPEG\n", i, info->width, info->height);
      continue;
    }
    ++decoded;
    ASSERT_EQ((*got)[i].sizes(), (std::vector<int64_t>{info->height, info->width, 3}));
    const torch::Tensor ref = torch::from_blob(want->rgb.data(), {info->height, info->width, 3}, torch::kUInt8);
    const torch::Tensor diff = ((*got)[i].cpu().to(torch::kInt32) - ref.to(torch::kInt32)).abs().to(torch::kFloat32);
    std::printf("image %zu (%dx%d): mean |diff| %.3f, max %.0f\n", i, info->width, info->height,
                diff.mean().item<float>(), diff.max().item<float>());
    EXPECT_LT(diff.mean().item<float>(), 2.0f) << "image " << i;
  }
  EXPECT_GE(decoded, 3) << "the three ImageNet-sized ones at least";
  // A batch with a truncated JPEG: an error for the batch or images for the rest, never a crash.
  std::vector<std::string> mixed{jpegs[0], jpegs[1].substr(0, jpegs[1].size() / 2), jpegs[2]};
  std::vector<std::string_view> mixed_views(mixed.begin(), mixed.end());
  absl::StatusOr<std::vector<torch::Tensor>> partial = (*nv)->Decode(mixed_views);
  torch::cuda::synchronize();
  std::printf("a batch with a truncated JPEG: %s\n", partial.ok() ? "decoded" : std::string(partial.status().message()).c_str());
  // And the decoder still works after it.
  got = (*nv)->Decode(views);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE((*got)[0].defined());  // 500x375
}

// The GPU's resize is the loader's resampler (the same taps) to float rounding, fractional
// validation boxes included; no nvJPEG needed.
TEST(CudaTest, CropAndResizeOnTheGpuIsTheLoadersResampler) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(5);
  const torch::Tensor image = torch::randint(0, 256, {375, 500, 3}, torch::kUInt8);
  for (const data::Box& box : {data::Box{31, 17, 300, 211}, data::CenterCropBox(500, 375, 256, 224)}) {
    const testing::ResizeDiff diff = testing::DiffFromLoadersResampler(image, box, 224, torch::Device(torch::kCUDA, 0));
    std::printf("box at %.2f,%.2f: max |diff| %d, mean %.4f\n", box.x, box.y, diff.max, diff.mean);
    EXPECT_LE(diff.max, 1);
  }
}

// The loader's JPEGs decoded, cropped, resized and flipped on the GPU, on the decode stream, read on
// the default stream after its event: the loader's own pixels within a few levels.
TEST(CudaTest, BatchesAssembledOnTheGpuAreTheLoadersWithinAFewLevels) {
  SKIP_WITHOUT_CUDA();
  if (!NvJpegBuilt()) GTEST_SKIP() << "built without nvJPEG (no nvjpeg.h or libnvjpeg found)";
  const torch::Device gpu(torch::kCUDA, 0);
  absl::StatusOr<std::unique_ptr<JpegBatchDecoder>> nv = MakeNvJpegDecoder(gpu);
  ASSERT_TRUE(nv.ok()) << nv.status();
  const std::string root = MakeTempDir() + "/ds";
  for (int i = 0; i < 24; ++i) {
    data::testing::WriteFile(root + "/c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".jpg",
                             data::testing::SmoothJpeg(200 + 13 * i, 150 + 7 * i, static_cast<uint64_t>(i)));
  }
  auto ds = std::move(data::OpenImageFolder(root).value());
  auto epoch = [&](int64_t hand_on) {
    data::LoaderOptions o;
    o.batch_size = 8;
    o.image_size = 64;
    o.seed = 3;
    o.hand_on_jpegs_up_to_pixels = hand_on;
    return data::testing::AllBatches(*ds, o, 0);
  };
  const std::vector<data::Batch> want = epoch(0);
  std::vector<data::Batch> got = epoch(kDeviceDecodeMaxPixels);
  DeviceBatchAssembler assembler(std::move(*nv), gpu);
  ASSERT_EQ(got.size(), want.size());
  // Every batch queued before any is read back, its JPEG bytes overwritten once queued: training
  // queues batch n+1 while the GPU decodes batch n, and frees a batch's bytes while its images may
  // still be decoding. Nothing may depend on a batch being done.
  std::vector<torch::Tensor> assembled;
  for (data::Batch& b : got) {
    assembled.push_back(assembler.Assemble(b));
    for (data::EncodedSample& e : b.encoded) e.bytes.assign(e.bytes.size(), '\xff');
  }
  for (size_t b = 0; b < got.size(); ++b) {
    const torch::Tensor pixels = assembled[b].cpu();
    const torch::Tensor ref = torch::from_blob(const_cast<uint8_t*>(want[b].pixels.data()), {want[b].count, 64, 64, 3},
                                               torch::kUInt8);
    const torch::Tensor diff = (pixels.to(torch::kInt32) - ref.to(torch::kInt32)).abs().to(torch::kFloat32);
    std::printf("batch %zu: mean |diff| %.3f, max %.0f\n", b, diff.mean().item<float>(), diff.max().item<float>());
    EXPECT_LT(diff.mean().item<float>(), 2.0f) << "batch " << b;
  }
  EXPECT_EQ(assembler.device_decoded(), 24);
  EXPECT_EQ(assembler.host_decoded(), 0);
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
