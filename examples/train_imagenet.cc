// train_imagenet: ResNet training on ImageNet-style data, one process or many (under dtrun or
// torchrun), with the behaviour of pytorch/examples imagenet/main.py plus fast-recipe options.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/build_info.h"
#include "examples/cli_checks.h"
#include "torch/cuda.h"
#include "worker/error_record.h"
#include "worker/resnet.h"
#include "worker/trainer.h"

namespace {
constexpr char kProgram[] = "train_imagenet";
}  // namespace

int main(int argc, char** argv) {
  using dtrun::examples::Ints;
  using dtrun::examples::OneOf;
  using dtrun::examples::Reals;
  using dtrun::worker::AmpMode;
  using dtrun::worker::LrShape;
  using dtrun::worker::Overlap;
  dtrun::worker::TrainOptions o;
  CLI::App app("train_imagenet: ResNet training with DDP over the dtrun input pipeline", "train_imagenet");
  app.set_version_flag("--version", dtrun::VersionText("train_imagenet"));
  app.add_option("data", o.data, "Folder with train/ and val/ (ImageFolder or tar shards)");
  app.add_flag("--synthetic", o.synthetic, "Random data, no files");
  app.add_option("--synthetic-size", o.synthetic_size, "Synthetic training images")->capture_default_str()->check(Ints(1));
  app.add_option("--arch,-a", o.arch, "resnet18|34|50|101|152")->capture_default_str();
  app.add_option("--epochs", o.epochs)->capture_default_str()->check(Ints(1));
  app.add_option("-b,--batch-size", o.batch_size, "Per process")->capture_default_str()->check(Ints(1));
  app.add_option("--lr", o.lr.base_lr)->capture_default_str()->check(Reals(0, 1e6, /*open_low=*/true));
  OneOf<LrShape>(app.add_option("--lr-schedule", o.lr.kind,
                                 "Learning-rate schedule: step (x0.1 every --lr-step-epochs) or cosine"),
                 {{"step", LrShape::kStep}, {"cosine", LrShape::kCosine}})
      ->default_str("step");
  app.add_option("--lr-step-epochs", o.lr.step_epochs)->capture_default_str()->check(Ints(1));
  app.add_option("--warmup-epochs", o.lr.warmup_epochs)->capture_default_str()->check(Reals(0, 1e6));
  app.add_option("--momentum", o.momentum)->capture_default_str()->check(Reals(0, 1));
  app.add_flag("--nesterov", o.nesterov);
  app.add_option("--wd,--weight-decay", o.weight_decay)->capture_default_str()->check(Reals(0, 1));
  app.add_flag("--no-wd-bn-bias", o.no_wd_on_bn_bias, "No weight decay on BN parameters and biases");
  app.add_option("--label-smoothing", o.label_smoothing)->capture_default_str()->check(Reals(0, 1, false, /*open_high=*/true));
  app.add_flag("--zero-init-residual", o.zero_init_residual);
  app.add_flag("!--no-channels-last", o.channels_last, "Keep NCHW memory (default: channels-last)");
  app.add_flag("!--no-retain-host-memory", o.retain_host_memory,
               "Let malloc return freed memory to the kernel (default: keep it; faster CPU steps, higher RSS)");
  app.add_option("-j,--workers", o.workers, "Loader threads")->capture_default_str()->check(Ints(1, 1024));
  app.add_option("--max-image-pixels", o.max_image_pixels, "Skip images whose header claims more pixels (untrusted data)")
      ->capture_default_str()
      ->check(Ints(1024, int64_t{1} << 34));
  app.add_option("--threads", o.threads, "Compute threads (default: OMP_NUM_THREADS)")->check(Ints(1, 4096));
  app.add_option("--image-size", o.image_size)->capture_default_str()->check(Ints(16, 4096));
  std::string size_schedule;
  app.add_option("--size-schedule", size_schedule,
                 "Progressive resizing: EPOCH:SIZE:BATCH,... e.g. 0:128:64,10:224:32,16:288:24");
  app.add_flag("--lr-scale-with-batch", o.scale_lr_with_batch, "--lr is per 256 images: scale by the global batch");
  app.add_option("-p,--print-freq", o.print_freq)->capture_default_str()->check(Ints(1));
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_option("--desired-acc", o.desired_acc, "Stop when val top-1 (%) reaches it")->check(Reals(0, 100));
  app.add_option("--output-dir,--state-dir", o.output_dir, "Checkpoints and metrics.jsonl")->capture_default_str();
  app.add_option("--save-every-minutes", o.save_every_minutes)->capture_default_str()->check(Reals(0, 1e6));
  app.add_flag("--checkpoint-every-node", o.checkpoint_every_node,
               "Each node's local rank 0 also writes checkpoints to its own --output-dir (local disks)");
  app.add_option("--resume", o.resume, "Checkpoint to start from (default: newest in --output-dir)");
  app.add_flag("-e,--evaluate", o.evaluate, "Only validate");
  app.add_option("--num-classes", o.num_classes, "Default: from the dataset")->check(Ints(1, 1 << 24));
  app.add_option("--bucket-mb", o.bucket_mb, "DDP gradient bucket size")->capture_default_str()->check(Reals(0, 1 << 16, true));
  app.add_flag("!--no-fused-bn", o.fused_bn, "ATen's separate BatchNorm, add and ReLU instead of the fused CPU kernels");
  app.add_flag("--sync-bn", o.sync_bn, "SyncBatchNorm: batch statistics over all processes (small per-process batches)");
  OneOf<Overlap>(app.add_option("--overlap", o.overlap,
                                 "Gradient all-reduce during backward: auto (on with NCCL, off on the CPU), on, off"),
                 {{"auto", Overlap::kAuto}, {"on", Overlap::kOn}, {"off", Overlap::kOff}})
      ->default_str("auto");
  OneOf<AmpMode>(app.add_option("--amp", o.amp, "Mixed precision: off, bf16 (CPU/CUDA) or fp16 (CUDA)"),
                 {{"off", AmpMode::kOff}, {"bf16", AmpMode::kBf16}, {"fp16", AmpMode::kFp16}})
      ->default_str("off");
  app.add_flag("--grad-scaler", o.grad_scaler, "Dynamic loss scaling even without fp16");
  app.add_option("--collective-timeout", o.collective_timeout_s, "Seconds before a hung collective ends the worker (exit 75)")
      ->capture_default_str()->check(Reals(0, 1e7, true));
  app.add_flag("!--no-tensorboard", o.tensorboard, "Do not write TensorBoard event files");
  app.add_flag("--cudnn-bn-relu", o.cudnn_bn_relu,
               "On a GPU: batch norm, residual add and ReLU as one cuDNN call (fp16, channels-last; not yet measured)");
  app.add_flag("--gpu-decode", o.gpu_decode,
               "On a GPU: decode the JPEGs there with nvJPEG, in batches, beside the loader threads; they then mostly "
               "read files (not yet measured)");
  app.add_option("--gpu-decode-share", o.gpu_decode_share,
                 "With --gpu-decode: the share of the JPEGs the GPU decodes, the loader threads the rest "
                 "(default: balanced by their measured speeds)")
      ->check(Reals(0, 1));
  app.add_flag("!--no-cuda-graphs", o.cuda_graphs, "On a GPU: queue the step's kernels one by one instead of replaying a CUDA graph");
  app.add_option("--profile-steps", o.profile_steps,
                 "Trace this many steps (from the first timed one) with PyTorch's profiler (CUDA builds)")->check(Ints(0));
  app.add_option("--profile-out", o.profile_out, "Where --profile-steps writes its Chrome trace")
      ->default_str("OUTPUT_DIR/trace.json");
  std::string dist_backend = "gloo";
  app.add_option("--dist-backend", dist_backend, "gloo (CPU tensors); NCCL is chosen for CUDA builds")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  dtrun::examples::AddBenchmarkFlags(app, {&o.warmup_iters, &o.timed_iters, &o.bench_json}, "images", 0);
  if (std::optional<int> exit_code = dtrun::examples::ParseCommandLine(app, argc, argv, kProgram)) return *exit_code;
  if (!dtrun::worker::IsKnownArch(o.arch)) {
    dtrun::worker::ReportFatalError(
        kProgram,
        absl::StrCat("unknown --arch ", o.arch, "; use resnet18, resnet34, resnet50, resnet101 or resnet152"));
    return 2;
  }
  if (o.data.empty() && !o.synthetic) {
    dtrun::worker::ReportFatalError(kProgram, "give a data folder (with train/ and val/) or --synthetic");
    return 2;
  }
  // Only global rank 0 reads the checkpoint (the others get its bytes), so only it needs the file.
  const char* rank = std::getenv("RANK");
  const bool reads_checkpoints = rank == nullptr || std::string(rank) == "0";
  if (reads_checkpoints && !o.resume.empty() && !std::filesystem::is_regular_file(o.resume)) {
    dtrun::worker::ReportFatalError(kProgram,
                                    absl::StrCat("--resume ", o.resume,
                                                 ": no such checkpoint file; give a checkpoint-*.pt path, or "
                                                 "leave --resume out to continue from the newest in --output-dir"));
    return 2;
  }
  if (dist_backend == "nccl" && !torch::cuda::is_available()) {
    dtrun::worker::ReportFatalError(kProgram,
                                    "--dist-backend nccl needs CUDA GPUs, and this process sees none (or "
                                    "LibTorch was built without CUDA); use gloo");
    return 2;
  }
  o.lr.total_epochs = o.epochs;
  if (o.profile_steps > 0 && o.profile_out.empty()) o.profile_out = o.output_dir + "/trace.json";
  for (size_t start = 0; start < size_schedule.size();) {
    size_t end = size_schedule.find(',', start);
    std::string stage = size_schedule.substr(start, end == std::string::npos ? std::string::npos : end - start);
    dtrun::worker::TrainOptions::SizeStage s{};
    if (std::sscanf(stage.c_str(), "%d:%d:%d", &s.from_epoch, &s.image_size, &s.batch_size) != 3 ||
        s.image_size < 16 || s.batch_size < 1) {
      dtrun::worker::ReportFatalError(kProgram,
                                      absl::StrCat("--size-schedule stage '", stage, "' is not EPOCH:SIZE:BATCH"));
      return 2;
    }
    o.size_schedule.push_back(s);
    start = end == std::string::npos ? end : end + 1;
  }
  return dtrun::worker::RunTraining(o);
}
