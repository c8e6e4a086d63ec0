#include "worker/trainer.h"

#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <utility>

#include "nlohmann/json.hpp"
#include "progress/progress_client.h"
#include "worker/checkpoint.h"
#include "worker/collective_watchdog.h"
#include "worker/crash_report.h"
#include "worker/cudnn_batch_norm_relu.h"
#include "worker/data/dataset.h"
#include "worker/data/loader.h"
#include "worker/ddp.h"
#include "worker/decode_share.h"
#include "worker/device_batch.h"
#include "worker/device_step.h"
#include "worker/error_record.h"
#include "worker/exception_text.h"
#include "worker/foreach_sgd.h"
#include "worker/grad_scaler.h"
#include "worker/host_memory.h"
#include "worker/job_resume.h"
#include "worker/memory_snapshot.h"
#include "worker/metrics_log.h"
#include "worker/nvjpeg_decoder.h"
#include "worker/parameter_faults.h"
#include "worker/rank_zero_log.h"
#include "worker/replica_check.h"
#include "worker/resnet.h"
#include "worker/step_agreement.h"
#include "worker/step_profiler.h"
#include "worker/stop_signal.h"
#include "worker/sync_batch_norm.h"
#include "worker/tensorboard.h"
#include "worker/torch_compat.h"
#include "worker/train_state.h"
#include "worker/warm_start.h"

namespace dtrun::worker {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kProgram[] = "train_imagenet";  // its errors' prefix
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// User + system CPU time of the whole process so far.
double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// When the program was loaded (static initialisation, LibTorch linked in): the benchmark's time
// to the first step counts from here.
const Clock::time_point kLoaded = Clock::now();

// A loader batch as tensors: uint8 NHWC pixels and int64 labels. On CUDA they are copied into
// pinned memory here, so the copies to the GPU can be non-blocking (a copy from pageable memory
// waits for the GPU's stream to drain); on CPU they are views of the batch, which they keep alive.
// With an assembler (--gpu-decode) the pixels are made on the device, there already.
struct StagedBatch {
  data::Batch batch;
  torch::Tensor pixels, labels;
};

StagedBatch Stage(data::Batch b, bool cuda, DeviceBatchAssembler* assembler = nullptr) {
  StagedBatch s{std::move(b), {}, {}};
  if (assembler) {
    s.pixels = assembler->Assemble(s.batch);  // may drop undecodable samples: before the labels
  } else {
    s.pixels = torch::from_blob(s.batch.pixels.data(), {s.batch.count, s.batch.image_size, s.batch.image_size, 3},
                                torch::kUInt8);
    if (cuda) s.pixels = s.pixels.pin_memory();
  }
  s.labels = torch::from_blob(s.batch.labels.data(), {s.batch.count}, torch::kInt64);
  if (cuda) s.labels = s.labels.pin_memory();
  return s;
}

// ImageNet normalisation folded for uint8 input: (x/255 − mean)/std = (x − 255·mean)/(255·std).
struct Normalizer {
  torch::Tensor mean, std;  // [1,3,1,1] on the training device, made once
  explicit Normalizer(const torch::Device& device)
      : mean(PerChannel255(data::kImageNetMean, device)), std(PerChannel255(data::kImageNetStd, device)) {}

  static torch::Tensor PerChannel255(const float (&v)[3], const torch::Device& device) {
    return torch::tensor({v[0], v[1], v[2]}).mul(255).view({1, 3, 1, 1}).to(device);
  }
};

// uint8 NHWC pixels → normalised float NCHW, on the pixels' device. The NHWC buffer viewed as
// NCHW already has channels-last strides, which the float conversion keeps: no transposing copy
// in that case.
torch::Tensor Normalize(const torch::Tensor& pixels, bool channels_last, const Normalizer& norm) {
  torch::Tensor x = pixels.permute({0, 3, 1, 2}).to(torch::kFloat32);
  x = x.sub_(norm.mean).div_(norm.std);
  return channels_last ? x.contiguous(torch::MemoryFormat::ChannelsLast) : x.contiguous();
}

// A staged batch's pixels, normalised on `device`.
torch::Tensor ToInput(const StagedBatch& b, bool channels_last, const torch::Device& device, const Normalizer& norm) {
  return Normalize(b.pixels.to(device, /*non_blocking=*/true), channels_last, norm);
}

// Correct top-1 and top-5 predictions in the batch.
std::pair<int64_t, int64_t> TopK(const torch::Tensor& logits, const torch::Tensor& target) {
  int64_t k = std::min<int64_t>(5, logits.size(1));
  torch::Tensor pred = std::get<1>(logits.topk(k, 1));
  torch::Tensor hit = pred.eq(target.view({-1, 1}));
  return {hit.narrow(1, 0, 1).sum().item<int64_t>(), hit.sum().item<int64_t>()};
}

class Training {
 public:
  Training(const TrainOptions& o, DistEnv env) : o_(o), env_(std::move(env)) {}
  int Run();

 private:
  bool Setup();
  // Setup's phases; the bool ones report a fatal error and return false.
  bool SetUpDeviceAndGroup();
  bool OpenDatasets();
  void BuildModelAndOptimizer();
  bool PrepareResume();
  void SetUpDdp();
  void OpenOutputs();
  void TrainEpoch(int64_t epoch, int64_t first_batch);
  // This rank's wishes after a step that began at `step_start`, for the ranks' vote.
  StepWishes Wishes(Clock::time_point step_start);
  // Saves, snapshots or stops as the ranks decided after the step before batch `step`; true to stop.
  bool ActOn(const StepVerdict& verdict, int64_t epoch, int64_t step);
  void MakeLoaders(int image_size, int batch_size);
  std::pair<int, int> SizeAndBatchAt(int64_t epoch) const;  // image size, batch per process
  void ApplySizeSchedule(int64_t epoch);
  int loader_size_ = 0;
  int loader_batch_ = 0;
  double Validate(int64_t epoch);  // returns top-1 %
  std::vector<double> AllReduceSum(std::vector<double> v);
  void Metrics(const nlohmann::json& j);
  void Save(int64_t epoch, int64_t next_batch);
  // Global rank 0, and with --checkpoint-every-node each node's local rank 0 (its own disk).
  bool WritesCheckpoints() const;

  TrainOptions o_;
  DistEnv env_;
  RankZeroLog log_{env_.rank};
  std::optional<ProcessGroupHandle> pg_;
  std::unique_ptr<data::Dataset> train_set_, val_set_;
  std::unique_ptr<data::Loader> train_loader_, val_loader_;
  ResNet model_{nullptr};
  std::unique_ptr<ForeachSgd> optimizer_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  Progress progress_;
  // Heartbeats and sections (step, eval, checkpoint) to the dtrun agent; a no-op elsewhere.
  progress::ProgressClient reports_;
  int64_t samples_reported_ = 0;
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::unique_ptr<EventWriter> tb_;
  bool autocast_ = false;
  bool cuda_ = false;
  torch::Device device_ = torch::kCPU;
  at::ScalarType autocast_dtype_ = at::kBFloat16;
  Clock::time_point last_save_ = Clock::now();
  MetricsLog metrics_;
  bool stop_ = false;
  int64_t bench_steps_ = 0;
  Clock::time_point bench_start_;
  double bench_data_wait_s_ = 0;  // timed steps' wait for the loader
  double first_step_s_ = 0;        // from the program's start to the first step done
  double bench_cpu_start_s_ = 0;   // the process's CPU time when the timed window began
  bool BenchStep(int batch_images);
  std::optional<StagedBatch> NextTrainBatch();
  std::unique_ptr<Normalizer> norm_;
  // --gpu-decode: JPEGs decoded on the GPU (null otherwise).
  std::unique_ptr<DeviceBatchAssembler> assembler_;
  std::optional<DecodeShare> decode_share_;  // how much of it the GPU takes
  void SetUpGpuDecode();
  void BalanceDecoding(const data::Batch& from_loader);
  // The share of JPEGs the loaders hand on: none once the GPU's decoder is dropped.
  double HandOnShare() const { return assembler_->decoder_in_use() ? decode_share_->share() : 0.0; }
  // In-memory snapshots held by the dtrun agent (null elsewhere, in benchmark and evaluate modes).
  std::unique_ptr<MemorySnapshots> snapshots_;
  FaultPlan faults_ = FaultPlan::FromEnvironment(env_.rank, env_.restart_count);  // test-only (DTRUN_FAULT_*)
  // What the ranks decide after each step, and the replica check of every kept state.
  std::optional<StepAgreement> agreement_;
  TrainState State() { return TrainState{model_.ptr().get(), optimizer_.get(), scaler_.get(), &progress_}; }

  // The step on the GPU without host syncs (worker/device_step.h): CUDA LibTorch 2.4+.
  bool device_step_ = false;
  // The ranks' vote after each step is read a step later (StepAgreement::Propose): where the step
  // runs on GPUs in several processes, unless DTRUN_STEP_VOTE says otherwise.
  bool lagged_votes_ = false;
  torch::Tensor lr_t_;  // the learning rate on the device, set before each step
  std::optional<GraphedStep> graphed_step_;
  LaggedReadback readback_;  // per step: loss, correct top-1, overflow flag, loss scale
  bool last_loss_finite_ = true;
  // The step kernel by kernel, reading the loss and the scaler's overflow flag back (the CPU,
  // LibTorch before 2.4); takes the next batch into `b` while the GPU works. Returns the loss and the
  // correct top-1 predictions, tagged with the batch size.
  std::pair<torch::Tensor, torch::Tensor> ForwardAndLoss(const torch::Tensor& x, const torch::Tensor& labels);
  LaggedReadback::Values StepReadingBack(std::optional<StagedBatch>& b, double* data_wait);
  // The step on the GPU, queued or replayed with nothing read back; the next batch meanwhile.
  void StepOnDevice(std::optional<StagedBatch>& b, double lr, double* data_wait);
  void SetUpDeviceStep();
  torch::Tensor QueueStepBody(const torch::Tensor& pixels, const torch::Tensor& labels);
  int64_t steps_run_ = 0;  // steps taken by this process
  std::unique_ptr<StepProfiler> profiler_;
};

// The forward pass and the loss, under autocast when on: both steps' first half.
std::pair<torch::Tensor, torch::Tensor> Training::ForwardAndLoss(const torch::Tensor& x, const torch::Tensor& labels) {
  AutocastScope autocast(autocast_, cuda_, autocast_dtype_);
  torch::Tensor logits = model_->forward(x);
  torch::Tensor loss = torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32), labels,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(o_.label_smoothing));
  return {logits, loss};
}

LaggedReadback::Values Training::StepReadingBack(std::optional<StagedBatch>& b, double* data_wait) {
  const int count = b->batch.count;
  torch::Tensor x = ToInput(*b, o_.channels_last, device_, *norm_);
  // Owned by the step: `b` moves on to the next batch before the step is done.
  torch::Tensor y = cuda_ ? b->labels.to(device_, /*non_blocking=*/true) : b->labels.clone();
  if (ddp_) ddp_->SyncBuffers();
  auto [logits, loss] = ForwardAndLoss(x, y);
  ClearGradients(*model_);
  scaler_->Scale(loss).backward();
  // The next batch is taken (and pinned) while the GPU works through this step's backward,
  // before anything below waits for the GPU (the loss scaler's overflow check, the loss).
  auto fetch_start = Clock::now();
  b = NextTrainBatch();
  *data_wait = Seconds(fetch_start, Clock::now());
  if (ddp_) ddp_->FinishGradientSync();
  bool step_ok = scaler_->UnscaleAndUpdate(model_->parameters(), [this](bool mine) {
    return AllReduceSum({mine ? 1.0 : 0.0})[0] > 0;
  });
  agreement_->FinishSnapshot();  // before the parameters change
  if (step_ok) optimizer_->step();
  return {{loss.item<float>(), static_cast<float>(TopK(logits.detach(), y).first), 0, 0}, count};
}

void Training::StepOnDevice(std::optional<StagedBatch>& b, double lr, double* data_wait) {
  // The last snapshot's copy is done before this step's update: on the GPU, the host not waiting.
  agreement_->FinishSnapshotBeforeDeviceStep();
  lr_t_.fill_(lr);
  readback_.Push(graphed_step_->Run(b->pixels, b->labels, loader_batch_), b->batch.count);
  auto fetch_start = Clock::now();
  b = NextTrainBatch();  // while the GPU runs the step
  *data_wait = Seconds(fetch_start, Clock::now());
}

void Training::SetUpDeviceStep() {
  lagged_votes_ = StepVotesLagged(cuda_ && StepGraph::Supported() && env_.distributed());
  if (!cuda_) return;
  if (!StepGraph::Supported()) {
    log_.Print("=> the step reads the GPU's loss and overflow flag every step (this LibTorch is older than 2.4)");
    return;
  }
  device_step_ = true;
  lr_t_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  scaler_->KeepStateOn(device_);
  // Several processes: NCCL's collectives are queued on the GPU like the step's kernels, but are
  // not captured in the graph (that takes NCCL's graph-safe mode, never run here: no machine with
  // several GPUs).
  const bool graphs = o_.cuda_graphs && !env_.distributed();
  graphed_step_.emplace(
      *model_, device_, graphs,
      [this](const torch::Tensor& pixels, const torch::Tensor& labels) { return QueueStepBody(pixels, labels); },
      [this](const std::string& line) { log_.Print("%s", line.c_str()); });
  log_.Print("=> the step runs on the GPU without host syncs; CUDA graphs %s%s",
             graphs            ? "on"
             : !o_.cuda_graphs ? "off (--no-cuda-graphs)"
                               : "off (several processes)",
             lagged_votes_ ? "; the ranks' vote after each step is read a step later" : "");
}

// Forward, backward, loss scaling and the optimizer update, queued without reading anything back.
// Returns float [4] on the device: the loss, correct top-1 predictions, the overflow flag, the loss
// scale after the update.
torch::Tensor Training::QueueStepBody(const torch::Tensor& pixels, const torch::Tensor& labels) {
  if (ddp_) ddp_->SyncBuffers();
  auto [logits, loss] = ForwardAndLoss(Normalize(pixels, o_.channels_last, *norm_), labels);
  scaler_->ScaleOnDevice(loss).backward();
  if (ddp_) ddp_->FinishGradientSync();  // NCCL: the stream waits for the buckets, not the host
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : model_->parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  torch::Tensor found_inf = scaler_->UnscaleOnDevice(grads);
  if (pg_ && found_inf.defined()) {
    // Every rank skips the step if any overflowed, as the host path's all-reduce decides.
    CollectiveWatchdog::Scope guard(watchdog_.get(), "the overflow flag's all-reduce");
    StartAllReduceMax(*pg_, found_inf)->wait();
  }
  optimizer_->StepOnDevice(lr_t_, found_inf);
  scaler_->UpdateOnDevice();
  torch::NoGradGuard no_grad;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  torch::Tensor correct = logits.argmax(1).eq(labels).sum().to(torch::kFloat32);
  torch::Tensor overflow = found_inf.defined() ? found_inf.reshape({}) : torch::zeros({}, f32);
  torch::Tensor scale = scaler_->state_on_device() ? scaler_->scale_on_device().reshape({}) : torch::ones({}, f32);
  return torch::stack({loss.detach().to(torch::kFloat32), correct, overflow, scale});
}

std::optional<StagedBatch> Training::NextTrainBatch() {
  std::optional<data::Batch> b = train_loader_->Next();
  if (!b) return std::nullopt;
  if (assembler_) BalanceDecoding(*b);
  return Stage(std::move(*b), cuda_, assembler_.get());
}

// Counts benchmark steps; returns true when the timed window is over (result printed).
bool Training::BenchStep(int batch_images) {
  if (o_.timed_iters <= 0) return false;
  ++bench_steps_;
  if (bench_steps_ == 1) {
    if (cuda_) torch::cuda::synchronize();
    first_step_s_ = Seconds(kLoaded, Clock::now());
  }
  if (bench_steps_ == o_.warmup_iters) {
    if (cuda_) torch::cuda::synchronize();  // the steps are queued ahead: time them done
    AllReduceSum({0});  // barrier
    bench_start_ = Clock::now();
    bench_cpu_start_s_ = ProcessCpuSeconds();
  }
  if (bench_steps_ < o_.warmup_iters + o_.timed_iters) return false;
  if (cuda_) torch::cuda::synchronize();
  AllReduceSum({0});
  const double secs = Seconds(bench_start_, Clock::now());
  const double ips = static_cast<double>(o_.timed_iters) * batch_images * env_.world_size / secs;
  // The cores this process kept busy (training loop, loader threads, LibTorch's): what feeding
  // the GPU costs.
  const double cpu_cores = (ProcessCpuSeconds() - bench_cpu_start_s_) / secs;
  log_.Print("=> benchmark: %d timed steps, %.1f images/s (global), %.3f s/step, %.1f CPU cores busy", o_.timed_iters,
             ips, secs / o_.timed_iters, cpu_cores);
  if (env_.rank == 0 && !o_.bench_json.empty()) {
    std::optional<double> gpu_s, loader_s;  // each decoder's measured seconds per image
    if (decode_share_) {
      gpu_s = decode_share_->device_seconds_per_image();
      loader_s = decode_share_->loader_seconds_per_image();
    }
    std::ofstream(o_.bench_json) << nlohmann::json{{"images_per_s", ips},
                                                   {"world_size", env_.world_size},
                                                   {"timed_iters", o_.timed_iters},
                                                   {"seconds", secs},
                                                   {"data_wait_s_per_step", bench_data_wait_s_ / o_.timed_iters},
                                                   {"first_step_s", first_step_s_},
                                                   {"cpu_cores_busy", cpu_cores},
                                                   {"gpu_decoded_jpegs", assembler_ ? assembler_->device_decoded() : 0},
                                                   {"host_decoded_jpegs", assembler_ ? assembler_->host_decoded() : 0},
                                                   {"gpu_decode_share", decode_share_ ? decode_share_->share() : 0.0},
                                                   {"gpu_decode_ms_per_image", gpu_s.value_or(0) * 1e3},
                                                   {"loader_decode_ms_per_image", loader_s.value_or(0) * 1e3}}
                                        .dump()
                                 << "\n";
  }
  stop_ = true;
  return true;
}

void Training::Metrics(const nlohmann::json& j) {
  if (env_.rank == 0) metrics_.Write(j);
}

std::vector<double> Training::AllReduceSum(std::vector<double> v) {
  if (!pg_) return v;
  CollectiveWatchdog::Scope guard(watchdog_.get(), "an all-reduce of training statistics");
  std::vector<torch::Tensor> t{torch::tensor(v, torch::kFloat64).to(pg_->nccl ? device_ : torch::Device(torch::kCPU))};
  pg_->backend->allreduce(t)->wait();
  torch::Tensor sums = t[0].cpu();
  for (size_t i = 0; i < v.size(); ++i) v[i] = sums[static_cast<int64_t>(i)].item<double>();
  return v;
}

void Training::SetUpGpuDecode() {
  if (!o_.gpu_decode) return;
  if (o_.synthetic) return;  // nothing to decode
  absl::StatusOr<std::unique_ptr<JpegBatchDecoder>> decoder = MakeNvJpegDecoder(device_);
  if (!decoder.ok()) {
    log_.Print("warning: --gpu-decode: %s; JPEGs are decoded by the %d loader threads",
               std::string(decoder.status().message()).c_str(), o_.workers);
    return;
  }
  decode_share_.emplace(o_.workers, o_.gpu_decode_share);
  if (decode_share_->fixed()) {
    log_.Print("=> JPEGs decoded on the GPU by %s: %.0f%% of them (--gpu-decode-share), the rest by %d loader threads",
               (*decoder)->Describe().c_str(), 100 * decode_share_->share(), o_.workers);
  } else {
    log_.Print("=> JPEGs decoded on the GPU by %s and by %d loader threads, shared by their measured speeds",
               (*decoder)->Describe().c_str(), o_.workers);
  }
  assembler_ = std::make_unique<DeviceBatchAssembler>(std::move(*decoder), device_, o_.max_image_pixels);
}

// Measures both decoders on what they just did and sets the share of the JPEGs the loader hands on.
void Training::BalanceDecoding(const data::Batch& from_loader) {
  const size_t loader_decoded = from_loader.encoded.empty() ? static_cast<size_t>(from_loader.count)
                                                            : from_loader.pixel_slots.size();
  decode_share_->ObserveLoader(static_cast<int>(loader_decoded), from_loader.decode_seconds);
  for (const DeviceBatchAssembler::DeviceTiming& t : assembler_->TakeDeviceTimings()) {
    decode_share_->ObserveDevice(t.images, t.seconds);
  }
  train_loader_->SetHandOnShare(HandOnShare());
}

// (Re)builds both loaders for an image size and per-process batch.
void Training::MakeLoaders(int image_size, int batch_size) {
  if (train_loader_ && loader_size_ == image_size && loader_batch_ == batch_size) return;
  loader_size_ = image_size;
  loader_batch_ = batch_size;
  train_loader_.reset();
  val_loader_.reset();
  data::LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.threads = o_.workers;
  // Each thread builds whole batches: with fewer batches in flight than threads, threads idle and
  // a GPU starves (4 in flight fed an H100 1,200 ResNet-50 images/s from 16 threads). Two per
  // thread, as DataLoader's prefetch_factor.
  lo.max_batches_ahead = std::max(4, 2 * o_.workers);
  lo.image_size = image_size;
  lo.seed = o_.seed;
  lo.max_image_pixels = o_.max_image_pixels;
  if (assembler_) lo.hand_on_jpegs_up_to_pixels = std::min(o_.max_image_pixels, kDeviceDecodeMaxPixels);
  lo.sampler = data::SamplerOptions{env_.rank, env_.world_size, true, o_.seed, false, true};
  train_loader_ = std::make_unique<data::Loader>(*train_set_, lo);
  lo.train = false;
  lo.sampler.shuffle = false;
  lo.sampler.pad = false;
  val_loader_ = std::make_unique<data::Loader>(*val_set_, lo);
}

// The size stage in force at `epoch` (progressive resizing).
std::pair<int, int> Training::SizeAndBatchAt(int64_t epoch) const {
  int size = o_.image_size, batch = o_.batch_size;
  for (const TrainOptions::SizeStage& s : o_.size_schedule) {
    if (epoch >= s.from_epoch) {
      size = s.image_size;
      batch = s.batch_size;
    }
  }
  return {size, batch};
}

void Training::ApplySizeSchedule(int64_t epoch) {
  const auto [size, batch] = SizeAndBatchAt(epoch);
  progress_.global_batch = int64_t{batch} * env_.world_size;
  if (size != loader_size_ || batch != loader_batch_) {
    log_.Print("=> epoch %lld: image size %d, batch %d per process", static_cast<long long>(epoch), size, batch);
  }
  MakeLoaders(size, batch);
}

// In this order: the device and the process group, the data, the model and its optimizer, the
// resume decision (which needs them all), then what the step and rank 0's outputs need.
bool Training::Setup() {
  if (o_.threads > 0) torch::set_num_threads(o_.threads);
  if (o_.retain_host_memory) RetainFreedHostMemory();
  torch::manual_seed(o_.seed);
  if (!SetUpDeviceAndGroup() || !OpenDatasets()) return false;
  MakeLoaders(o_.image_size, o_.batch_size);
  BuildModelAndOptimizer();
  if (!PrepareResume()) return false;
  SetUpDeviceStep();
  if (o_.profile_steps > 0) {
    profiler_ =
        std::make_unique<StepProfiler>(o_.profile_out, o_.timed_iters > 0 ? o_.warmup_iters : 0, o_.profile_steps);
  }
  SetUpDdp();
  if (env_.rank == 0) OpenOutputs();
  log_.Print("=> %s, %zu train / %zu val images, %zu classes, world size %d, batch %d per process, %d loader threads%s",
             o_.arch.c_str(), train_set_->size(), val_set_->size(), train_set_->classes().size(), env_.world_size,
             o_.batch_size, o_.workers, o_.sync_bn && pg_ ? ", SyncBatchNorm" : "");
  return true;
}

bool Training::SetUpDeviceAndGroup() {
  // CUDA builds train on the local rank's GPU with NCCL; otherwise CPU with Gloo.
  cuda_ = CudaCollectivesAvailable();
  if (cuda_) {
    device_ = torch::Device(torch::kCUDA, static_cast<int>(env_.local_rank % torch::cuda::device_count()));
    // Fixed input shapes: let cuDNN time its algorithms once and keep the fastest (as
    // torch.backends.cudnn.benchmark = True).
    at::globalContext().setBenchmarkCuDNN(true);
  }
  norm_ = std::make_unique<Normalizer>(device_);
  SetUpGpuDecode();
  if (env_.distributed()) {
    pg_ = InitProcessGroup(env_, std::chrono::minutes(30), cuda_);
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        std::chrono::milliseconds(static_cast<int64_t>(o_.collective_timeout_s * 1000)), env_.rank);
  }
  if (o_.amp == AmpMode::kFp16 && !cuda_) {
    ReportFatalError(kProgram, "--amp fp16 needs CUDA; on CPU use --amp bf16");
    return false;
  }
  autocast_ = o_.amp != AmpMode::kOff;
  autocast_dtype_ = o_.amp == AmpMode::kFp16 ? at::kHalf : at::kBFloat16;
  if (o_.scale_lr_with_batch) {
    o_.lr.base_lr = ScaledLr(o_.lr.base_lr, o_.batch_size * env_.world_size);
  }
  scaler_ = std::make_unique<GradScaler>(GradScalerOptions{o_.amp == AmpMode::kFp16 || o_.grad_scaler});
  return true;
}

bool Training::OpenDatasets() {
  auto open = [&](const std::string& split) -> std::unique_ptr<data::Dataset> {
    if (o_.synthetic) return data::MakeSyntheticDataset(split == "train" ? o_.synthetic_size : o_.synthetic_size / 4,
                                                         o_.num_classes > 0 ? o_.num_classes : 10);
    absl::StatusOr<std::unique_ptr<data::Dataset>> ds = data::OpenDataset(o_.data + "/" + split);
    if (!ds.ok()) {
      ReportFatalError(kProgram, ds.status().message());
      return nullptr;
    }
    return std::move(*ds);
  };
  train_set_ = open("train");
  if (!train_set_) return false;
  val_set_ = open("val");
  return val_set_ != nullptr;
}

void Training::BuildModelAndOptimizer() {
  ResNetOptions mo;
  mo.arch = o_.arch;
  mo.num_classes = o_.num_classes > 0 ? o_.num_classes : static_cast<int>(train_set_->classes().size());
  mo.zero_init_residual = o_.zero_init_residual;
  model_ = ResNet(mo);
  model_->SetFusedBatchNorm(o_.fused_bn);
  if (o_.cudnn_bn_relu && cuda_ && !CudnnBatchNormReluBuilt()) {
    log_.Print(
        "warning: --cudnn-bn-relu: this build has no cuDNN header or library; batch norm, add and ReLU stay apart");
  }
  model_->SetCudnnBatchNormRelu(o_.cudnn_bn_relu);
  model_->to(device_);
  if (o_.channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model_->named_parameters()) {
    bool bn_or_bias = p.value().dim() <= 1;
    (o_.no_wd_on_bn_bias && bn_or_bias ? no_decay : decay).push_back(p.value());
  }
  auto sgd = torch::optim::SGDOptions(o_.lr.base_lr).momentum(o_.momentum).nesterov(o_.nesterov);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::SGDOptions>(sgd.weight_decay(o_.weight_decay)));
  if (!no_decay.empty()) groups.emplace_back(no_decay, std::make_unique<torch::optim::SGDOptions>(sgd.weight_decay(0)));
  optimizer_ = std::make_unique<ForeachSgd>(groups, sgd);
}

// The checkpoint directory checked, the in-memory snapshots opened, and the state every rank
// resumes from restored: the job's newest common in-memory snapshot, else what rank 0 finds on
// disk (worker/job_resume.h).
bool Training::PrepareResume() {
  if (WritesCheckpoints() && !o_.evaluate && o_.timed_iters <= 0) {
    // An unwritable output dir is found now, not at the first save after an epoch of training.
    if (absl::Status st = PrepareCheckpointDir(o_.output_dir + "/checkpoints"); !st.ok()) {
      ReportFatalError(kProgram, st.message());
      return false;
    }
  }
  if (!o_.evaluate && o_.timed_iters <= 0) snapshots_ = MemorySnapshots::FromEnvironment(env_);
  agreement_.emplace(pg_ ? &*pg_ : nullptr, device_, env_.rank, env_.world_size, reports_, watchdog_.get(),
                     snapshots_.get());
  CollectiveWatchdog::Scope guard(watchdog_.get(), "the resume decision");
  const absl::Status resumed =
      ResumeAndReport(ResumeRequest{o_.output_dir + "/checkpoints", o_.resume, snapshots_.get()}, pg_ ? &*pg_ : nullptr,
                      env_.rank, device_, State(), reports_);
  if (!resumed.ok()) ReportFatalError(kProgram, resumed.message());
  return resumed.ok();
}

void Training::SetUpDdp() {
  if (!pg_) return;
  DdpOptions d;
  d.bucket_mb = o_.bucket_mb;
  d.broadcast_buffers = !o_.sync_bn;  // SyncBatchNorm's running statistics agree on every rank already
  // kAuto: during backward with NCCL, where idle copy engines and SMs carry the all-reduces (as
  // PyTorch's DDP does); after backward on the CPU, where Gloo's threads would take the cores
  // the step computes on (measured no faster: docs/BENCHMARKS.md, "Training").
  d.overlap = o_.overlap == Overlap::kOn || (o_.overlap == Overlap::kAuto && pg_->nccl);
  d.watchdog = watchdog_.get();
  ddp_ = std::make_unique<DistributedDataParallel>(model_.ptr(), *pg_, env_.world_size, d);
  if (o_.sync_bn) model_->SetBatchNormSync(std::make_shared<BatchNormSync>(*pg_, watchdog_.get()));
}

// Rank 0's metrics log and TensorBoard events.
void Training::OpenOutputs() {
  metrics_.StartRun(o_.output_dir, progress_.epoch, progress_.global_step);
  if (o_.tensorboard) tb_ = std::make_unique<EventWriter>(o_.output_dir + "/tb");
}

bool Training::WritesCheckpoints() const {
  // Every rank holds the same state after each step (DDP), so any of them can write it.
  return env_.rank == 0 || (o_.checkpoint_every_node && env_.local_rank == 0);
}

void Training::Save(int64_t epoch, int64_t next_batch) {
  last_save_ = Clock::now();
  // Every disk checkpoint is also a snapshot, so the newest snapshot is never older than the
  // newest checkpoint: a restart that finds one in memory needs no disk. Either way the replicas
  // are compared before anything is written (worker/step_agreement.h).
  agreement_->SnapshotAndCompare(State(), epoch, next_batch);
  if (!WritesCheckpoints()) return;
  progress_.epoch = epoch;
  progress_.next_batch = next_batch;
  progress::ScopedSection checkpoint_section(reports_, "checkpoint");
  absl::Status st = SaveCheckpoint(o_.output_dir + "/checkpoints", o_.keep_checkpoints, State());
  if (!st.ok()) {
    // Training goes on: the newest good checkpoint is still there, and the next save may succeed.
    log_.Print("warning: %s; training goes on, the last good checkpoint is kept", std::string(st.message()).c_str());
  }
}

void Training::TrainEpoch(int64_t epoch, int64_t first_batch) {
  model_->train();
  train_loader_->StartEpoch(epoch, static_cast<size_t>(first_batch));
  const int64_t steps = static_cast<int64_t>(train_loader_->batches_per_epoch());
  double loss_sum = 0, data_s = 0, compute_s = 0;
  int64_t seen = 0, correct1 = 0;
  auto window = Clock::now();
  auto data_start = Clock::now();
  int64_t step = first_batch;
  std::optional<StagedBatch> b = NextTrainBatch();
  double data_wait = Seconds(data_start, Clock::now());
  // On the GPU the step's numbers arrive a step late (LaggedReadback); on the CPU at once.
  readback_.Take(/*all=*/true);  // a step the last epoch left unread (it stopped early)
  auto account = [&](const LaggedReadback::Values& v) {
    loss_sum += static_cast<double>(v.values[0]) * v.tag;
    correct1 += static_cast<int64_t>(v.values[1]);
    seen += v.tag;
    last_loss_finite_ = std::isfinite(v.values[0]);
    if (v.values[2] > 0) {
      std::printf("Gradient overflow. Skipping step, loss scale reduced to %g\n", static_cast<double>(v.values[3]));
      std::fflush(stdout);
    }
  };
  while (b) {
    progress::ScopedSection step_section(reports_, "step");
    if (profiler_) profiler_->BeforeStep(steps_run_);
    ++steps_run_;
    auto compute_start = Clock::now();
    data_s += data_wait;
    if (o_.timed_iters > 0 && bench_steps_ >= o_.warmup_iters) bench_data_wait_s_ += data_wait;
    const double lr = o_.lr.At(epoch + static_cast<double>(step) / steps);
    for (auto& g : optimizer_->param_groups()) static_cast<torch::optim::SGDOptions&>(g.options()).lr(lr);
    const int count = b->batch.count;
    FaultsBeforeBackward(faults_, progress_.global_step + 1, env_.rank);  // test-only
    if (device_step_) {
      StepOnDevice(b, lr, &data_wait);
      for (const LaggedReadback::Values& v : readback_.Take(/*all=*/false)) account(v);
    } else {
      account(StepReadingBack(b, &data_wait));
    }
    ++progress_.global_step;
    FlipIfPlanned(faults_, *model_, progress_.global_step, env_.rank);  // test-only
    KillIfPlanned(faults_, progress_.global_step, env_.rank);           // test-only
    ++step;
    agreement_->Arm(State(), epoch, step);  // kept if this process fails before the next step
    samples_reported_ += count;
    reports_.Beat(progress_.global_step, samples_reported_);
    if (ddp_ && ddp_->last_sync()) {
      const SyncStopwatch::Lap& lap = *ddp_->last_sync();
      reports_.Sync(progress_.global_step - lap.steps_ago, lap.wait_s, lap.step_s);
    }
    compute_s += Seconds(compute_start, Clock::now()) - data_wait;
    if (BenchStep(count)) return;
    if (o_.timed_iters > 0) continue;
    // A stop request (SIGTERM), the save timer and the snapshot cadence: every rank must agree,
    // so they are all-reduced together, with the replica check of the state kept last.
    if (lagged_votes_) {
      // The vote of the step before, read now that this one is queued: the GPU is never idle.
      if (std::optional<StepVerdict> before = agreement_->TakeVerdict(); before && ActOn(*before, epoch, step)) return;
      agreement_->Propose(Wishes(compute_start), progress_.global_step);
    } else if (ActOn(agreement_->Decide(Wishes(compute_start), progress_.global_step), epoch, step)) {
      return;
    }
    if (step % o_.print_freq == 0 || step == steps) {
      for (const LaggedReadback::Values& v : readback_.Take(/*all=*/true)) account(v);
      double secs = Seconds(window, Clock::now());
      log_.Print("Epoch: [%lld][%lld/%lld] loss %.4f top1 %.2f lr %.5f img/s %.1f data %.3fs compute %.3fs",
                 static_cast<long long>(epoch), static_cast<long long>(step), static_cast<long long>(steps),
                 loss_sum / std::max<int64_t>(seen, 1), 100.0 * correct1 / std::max<int64_t>(seen, 1), lr,
                 seen * env_.world_size / std::max(secs, 1e-9), data_s, compute_s);
      if (tb_) {
        tb_->AddScalar("train/loss", static_cast<float>(loss_sum / std::max<int64_t>(seen, 1)), progress_.global_step);
        tb_->AddScalar("train/top1", static_cast<float>(100.0 * correct1 / std::max<int64_t>(seen, 1)), progress_.global_step);
        tb_->AddScalar("train/lr", static_cast<float>(lr), progress_.global_step);
        tb_->AddScalar("train/img_per_s", static_cast<float>(seen * env_.world_size / std::max(secs, 1e-9)), progress_.global_step);
        tb_->AddScalar("train/loss_scale", static_cast<float>(scaler_->scale()), progress_.global_step);
        tb_->Flush();
      }
      Metrics({{"kind", "train"}, {"epoch", epoch}, {"step", step}, {"steps_per_epoch", steps}, {"global_step", progress_.global_step},
               {"loss_scale", scaler_->scale()},
               {"loss", loss_sum / std::max<int64_t>(seen, 1)}, {"top1", 100.0 * correct1 / std::max<int64_t>(seen, 1)},
               {"lr", lr}, {"img_per_s", seen * env_.world_size / std::max(secs, 1e-9)},
               {"data_s", data_s}, {"compute_s", compute_s}});
      loss_sum = 0;
      seen = correct1 = 0;
      data_s = compute_s = 0;
      window = Clock::now();
    }
  }
  // The last step's vote, acted on where it would have been had the epoch gone on.
  if (std::optional<StepVerdict> last = agreement_->TakeVerdict()) ActOn(*last, epoch, step);
}

StepWishes Training::Wishes(Clock::time_point step_start) {
  StepWishes wishes;
  wishes.stop = StopRequested();
  wishes.save = Seconds(last_save_, Clock::now()) > o_.save_every_minutes * 60;
  wishes.snapshot = snapshots_ && snapshots_->Due(Seconds(step_start, Clock::now()));
  // fp16's loss scaling overflows now and then on purpose; otherwise a loss that is not finite
  // on some ranks only marks them (worker/replica_check.h).
  wishes.loss_finite = last_loss_finite_ || (autocast_ && autocast_dtype_ == at::kHalf);
  return wishes;
}

bool Training::ActOn(const StepVerdict& verdict, int64_t epoch, int64_t step) {
  if (verdict.stop || verdict.save) {
    Save(epoch, step);
  } else if (verdict.snapshot) {
    agreement_->Snapshot(State(), epoch, step);  // compared in the next step's all-reduce
  }
  if (!verdict.stop) return false;
  log_.Print("stop requested (%s): checkpoint written at epoch %lld batch %lld", strsignal(StopSignal()),
             static_cast<long long>(epoch), static_cast<long long>(step));
  stop_ = true;
  return true;
}

double Training::Validate(int64_t epoch) {
  progress::ScopedSection eval_section(reports_, "eval");
  model_->eval();
  torch::NoGradGuard no_grad;
  if (assembler_) {
    // The GPU takes the share of the JPEGs that training balanced: it is set by both decoders'
    // speeds per image, which a centre crop does not change.
    val_loader_->SetHandOnShare(HandOnShare());
  }
  val_loader_->StartEpoch(0);
  double loss = 0, c1 = 0, c5 = 0, n = 0;
  while (std::optional<data::Batch> next = val_loader_->Next()) {
    std::optional<StagedBatch> b = Stage(std::move(*next), cuda_, assembler_.get());
    AutocastScope autocast(autocast_, cuda_, autocast_dtype_);
    torch::Tensor logits = model_->forward(ToInput(*b, o_.channels_last, device_, *norm_)).to(torch::kFloat32);
    torch::Tensor y = b->labels.to(device_, /*non_blocking=*/true);
    loss += torch::nn::functional::cross_entropy(logits, y).item<double>() * b->batch.count;
    auto [k1, k5] = TopK(logits, y);
    c1 += k1;
    c5 += k5;
    n += b->batch.count;
  }
  std::vector<double> sums = AllReduceSum({loss, c1, c5, n});
  const double top1 = 100 * sums[1] / std::max(1.0, sums[3]), top5 = 100 * sums[2] / std::max(1.0, sums[3]);
  log_.Print(" * Epoch %lld val: top1 %.2f top5 %.2f loss %.4f (%d images)", static_cast<long long>(epoch), top1, top5,
             sums[0] / std::max(1.0, sums[3]), static_cast<int>(sums[3]));
  Metrics({{"kind", "val"}, {"epoch", epoch}, {"global_step", progress_.global_step}, {"top1", top1}, {"top5", top5}, {"loss", sums[0] / std::max(1.0, sums[3])}});
  if (tb_) {
    tb_->AddScalar("val/top1", static_cast<float>(top1), progress_.global_step);
    tb_->AddScalar("val/top5", static_cast<float>(top5), progress_.global_step);
    tb_->AddScalar("val/loss", static_cast<float>(sums[0] / std::max(1.0, sums[3])), progress_.global_step);
    tb_->Flush();
  }
  return top1;
}

int Training::Run() {
  if (!Setup()) return 2;
  InstallStopSignalHandlers();
  if (o_.evaluate) {
    ApplySizeSchedule(progress_.epoch);
    Validate(progress_.epoch);
    return 0;
  }
  reports_.Hello("cpp", ParksBeforeRounds());
  if (train_loader_) reports_.TotalSteps(o_.epochs * static_cast<int64_t>(train_loader_->batches_per_epoch()));
  // The resumed epoch's position on this run's global batch, once: later epochs start at batch 0.
  ContinueAtGlobalBatch(progress_, int64_t{SizeAndBatchAt(progress_.epoch).second} * env_.world_size, env_.rank);
  for (int64_t epoch = progress_.epoch; epoch < o_.epochs && !stop_; ++epoch) {
    ApplySizeSchedule(epoch);
    TrainEpoch(epoch, epoch == progress_.epoch ? progress_.next_batch : 0);
    if (stop_) return o_.timed_iters > 0 ? 0 : 128 + StopSignal();
    double top1 = Validate(epoch);
    progress_.best_acc1 = std::max(progress_.best_acc1, top1);
    Save(epoch + 1, 0);
    if (o_.desired_acc > 0 && top1 >= o_.desired_acc) {
      log_.Print("=> reached the desired accuracy %.2f%% (val top1 %.2f%%) after epoch %lld", o_.desired_acc, top1,
                 static_cast<long long>(epoch));
      break;
    }
  }
  if (snapshots_) log_.Print("=> %s", snapshots_->Summary().c_str());
  if (std::string checks = agreement_->Summary(); !checks.empty()) log_.Print("=> %s", checks.c_str());
  if (assembler_) {
    log_.Print("=> JPEGs: %lld decoded on the GPU, %lld left to the host; the GPU's share at the end %.0f%%",
               static_cast<long long>(assembler_->device_decoded()), static_cast<long long>(assembler_->host_decoded()),
               100 * decode_share_->share());
  }
  // The digest lets two runs be compared bit for bit (a resumed run against an uninterrupted one).
  log_.Print("=> done: best val top1 %.2f%%, %lld optimizer steps, parameter digest %016llx", progress_.best_acc1,
             static_cast<long long>(progress_.global_step), static_cast<unsigned long long>(ParameterDigest(*model_)));
  return 0;
}

}  // namespace

int RunTraining(const TrainOptions& options) {
  InstallCrashReport();  // a fatal signal names where it hit (faulthandler's job for Python)
  // A warm start parks here, before anything reads the round's environment (worker/warm_start.h).
  if (absl::Status st = AwaitRound(); !st.ok()) {
    ReportFatalError(kProgram, st.message());
    return 1;
  }
  absl::StatusOr<DistEnv> env = ReadDistEnv();
  if (!env.ok()) {
    ReportFatalError(kProgram, env.status().message());
    return 2;
  }
  try {
    return Training(options, *std::move(env)).Run();
  } catch (const ReplicasDiverged&) {
    return kReplicasDivergedExitCode;  // said on stderr by the check
  } catch (const std::exception& e) {
    ReportException(kProgram, e);
    return 1;
  }
}

}  // namespace dtrun::worker
