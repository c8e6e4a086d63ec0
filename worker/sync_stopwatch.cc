#include "worker/sync_stopwatch.h"

#include "worker/torch_compat.h"  // DTRUN_WITH_NCCL: a CUDA LibTorch

#if DTRUN_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>

#include <array>
#endif

namespace dtrun::worker {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

#if DTRUN_WITH_NCCL
// Three laps of events, by lap number mod 3: the one being recorded, the one read at its Stop, and
// the one before that (whose Stop starts the step read).
struct SyncStopwatch::CudaLaps {
  struct Events {
    at::cuda::CUDAEvent start{cudaEventDefault};  // the default flags keep timing on
    at::cuda::CUDAEvent stop{cudaEventDefault};
  };
  std::array<Events, 3> ring;
  int64_t stopped = 0;  // laps recorded so far

  Events& Lap(int64_t n) { return ring[static_cast<size_t>(n % 3)]; }

  void Start() { Lap(stopped).start.record(at::cuda::getCurrentCUDAStream()); }

  std::optional<SyncStopwatch::Lap> Stop() {
    Lap(stopped).stop.record(at::cuda::getCurrentCUDAStream());
    ++stopped;
    if (stopped < 2) return std::nullopt;
    const Events& last = Lap(stopped - 2);
    if (!last.stop.query()) return std::nullopt;  // the GPU is still at it: nobody waits for it here
    SyncStopwatch::Lap lap{1, last.start.elapsed_time(last.stop) / 1e3, 0};
    if (stopped >= 3) lap.step_s = Lap(stopped - 3).stop.elapsed_time(last.stop) / 1e3;
    return lap;
  }
};
#else
struct SyncStopwatch::CudaLaps {};
#endif

SyncStopwatch::SyncStopwatch(bool cuda) {
#if DTRUN_WITH_NCCL
  if (cuda) cuda_ = std::make_unique<CudaLaps>();
#else
  (void)cuda;
#endif
}

SyncStopwatch::~SyncStopwatch() = default;

void SyncStopwatch::Start() {
#if DTRUN_WITH_NCCL
  if (cuda_) return cuda_->Start();
#endif
  started_ = Clock::now();
}

void SyncStopwatch::Stop() {
#if DTRUN_WITH_NCCL
  if (cuda_) {
    newest_ = cuda_->Stop();
    return;
  }
#endif
  const Clock::time_point now = Clock::now();
  newest_ = Lap{0, Seconds(now - started_), last_stop_ == Clock::time_point{} ? 0 : Seconds(now - last_stop_)};
  last_stop_ = now;
}

}  // namespace dtrun::worker
