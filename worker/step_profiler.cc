#include "worker/step_profiler.h"

#include <cstdio>
#include <set>
#include <utility>

#include <torch/torch.h>

#include "worker/torch_compat.h"  // DTRUN_WITH_NCCL: a CUDA LibTorch

#if DTRUN_WITH_NCCL && TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#define DTRUN_HAS_KINETO_TRACE 1
#else
#define DTRUN_HAS_KINETO_TRACE 0
#endif

namespace dtrun::worker {

StepProfiler::StepProfiler(std::string path, int64_t first, int64_t count)
    : path_(std::move(path)), first_(first), count_(count) {}

StepProfiler::~StepProfiler() {
  if (on_) End();
}

void StepProfiler::BeforeStep(int64_t step) {
  if (count_ <= 0 || path_.empty()) return;
  if (step == first_) Begin();
  if (step == first_ + count_ && on_) End();
}

#if DTRUN_HAS_KINETO_TRACE
namespace {
namespace impl = torch::profiler::impl;
const std::set<impl::ActivityType>& Activities() {
  static const std::set<impl::ActivityType> a{impl::ActivityType::CPU, impl::ActivityType::CUDA};
  return a;
}
}  // namespace

void StepProfiler::Begin() {
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, Activities());
  torch::autograd::profiler::enableProfiler(config, Activities());
  on_ = true;
}

void StepProfiler::End() {
  on_ = false;
  torch::cuda::synchronize();  // the traced steps' GPU work belongs in the trace
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
  if (result) result->save(path_);
  std::printf("=> profile of %lld steps written to %s\n", static_cast<long long>(count_), path_.c_str());
  std::fflush(stdout);
}
#else
void StepProfiler::Begin() {
  std::fprintf(stderr, "warning: --profile-steps needs a CUDA build of LibTorch 2.x (Kineto); no trace written\n");
  count_ = 0;
}
void StepProfiler::End() {}
#endif

}  // namespace dtrun::worker
