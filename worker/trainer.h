// The ImageNet trainer behind examples/train_imagenet: ResNet + DDP over Gloo on CPU or NCCL on
// the local rank's GPU in CUDA builds (world size 1 without a launcher), the dtrun input
// pipeline, SGD with momentum/nesterov and weight decay (optionally none on BN and bias),
// step/cosine LR with warm-up, label smoothing, SyncBatchNorm, bf16/fp16 autocast with dynamic
// loss scaling, top-1/top-5 reduced across ranks, a log line every --print-freq steps, JSON-lines
// metrics, TensorBoard events, checkpoints (atomic, keep last K, resume mid-epoch) and
// --desired-acc early stop.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "worker/lr_schedule.h"

namespace dtrun::worker {

// Mixed precision: bf16 autocast (CPU or CUDA) or fp16 autocast with loss scaling (CUDA).
enum class AmpMode { kOff, kBf16, kFp16 };
// When DDP all-reduces gradients: during backward (kOn), after it (kOff), or by device (kAuto).
enum class Overlap { kAuto, kOn, kOff };

struct TrainOptions {
  std::string data;            // folder with train/ and val/ (ImageFolder or shards), or empty with synthetic
  bool synthetic = false;
  int synthetic_size = 1280;
  int num_classes = 0;         // 0: from the dataset
  std::string arch = "resnet18";
  int epochs = 90;
  int batch_size = 32;         // per process
  LrSchedule lr;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 1e-4;
  bool no_wd_on_bn_bias = false;
  double label_smoothing = 0;
  bool zero_init_residual = false;
  bool channels_last = true;   // NHWC activations and weights: faster oneDNN convolutions on CPU
  int workers = 2;             // loader threads
  int64_t max_image_pixels = int64_t{64} << 20;  // larger claimed image sizes are skipped undecoded
  int threads = 0;             // intra-op threads (0: torch default / OMP_NUM_THREADS)
  bool retain_host_memory = true;  // keep freed activations' pages (worker/host_memory.h)
  int image_size = 224;
  // Progressive resizing (fast ImageNet recipes): from epoch E, train at size S with batch B per
  // process. Empty: image_size and batch_size throughout. Validation uses the current size.
  struct SizeStage {
    int from_epoch, image_size, batch_size;
  };
  std::vector<SizeStage> size_schedule;
  bool scale_lr_with_batch = false;  // lr is per 256 images: lr × global batch / 256
  int print_freq = 10;
  uint64_t seed = 0;
  double desired_acc = 0;      // > 0: stop once val top-1 (percent) reaches it
  std::string output_dir = "runs/train";  // checkpoints/, metrics.jsonl
  double save_every_minutes = 2;
  int keep_checkpoints = 3;
  // Each node's local rank 0 also writes checkpoints to its own --output-dir (local disks): when
  // global rank 0 moves to another node (an elastic restart), that node has them too.
  bool checkpoint_every_node = false;
  std::string resume;          // a checkpoint path; default: newest valid in output_dir
  bool evaluate = false;       // only validate
  double bucket_mb = 25;
  bool fused_bn = true;        // fused BatchNorm(+add)+ReLU CPU kernels (worker/batch_norm_relu.h)
  bool cudnn_bn_relu = false;  // the same fused by cuDNN on a GPU (worker/cudnn_batch_norm_relu.h)
  bool sync_bn = false;        // batch-norm statistics over the global batch (worker/sync_batch_norm.h)
  // Gradient all-reduce during backward. Off for CPU training, where it competes with the compute
  // threads for the same cores (no gain, up to 8% slower on 2 cores, docs/BENCHMARKS.md); meant to
  // be on for CUDA, but kAuto stays off there until a GPU session measures it (trainer.cc).
  Overlap overlap = Overlap::kAuto;
  AmpMode amp = AmpMode::kOff;
  bool grad_scaler = false;    // dynamic loss scaling also without fp16 (fp16 always has it)
  double collective_timeout_s = 600;  // a hung collective ends the worker with exit code 75
  bool tensorboard = true;     // rank 0 writes OUTPUT/tb/events.out.tfevents.*
  // Benchmark mode: after `warmup_iters`, time `timed_iters` steps between barriers, print global
  // images/s (and write it as JSON to bench_json), then stop. No validation, no checkpoints.
  int warmup_iters = 3;
  int timed_iters = 0;
  std::string bench_json;
  // On a GPU (CUDA LibTorch 2.4+, one process): after a few steps at a batch shape, capture the
  // whole step as a CUDA graph and replay it (worker/device_step.h); a partial batch runs eagerly.
  bool cuda_graphs = true;
  // On a GPU: the loader hands JPEGs on undecoded, and nvJPEG decodes them on the GPU where the
  // build has it, the crop, resize and flip following there (worker/device_batch.h).
  bool gpu_decode = false;
  // The share of those JPEGs the GPU decodes (the loader's threads the rest); unset: balanced by
  // both sides' measured speeds (worker/decode_share.h).
  std::optional<double> gpu_decode_share;
  // Trace this many steps, from the first timed one (or the first), with PyTorch's profiler into
  // profile_out as a Chrome trace (worker/step_profiler.h).
  int profile_steps = 0;
  std::string profile_out;
};

// Runs training; returns the process exit code (0 on success). Logs from rank 0.
int RunTraining(const TrainOptions& options);

}  // namespace dtrun::worker
