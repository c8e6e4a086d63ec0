// Times a rank's wait inside each step's gradient all-reduce, for the straggler watch
// (docs/DESIGN.md, "Stragglers"), without ever making the host wait for the GPU.
//
// On CPU (Gloo) the collectives' wait() blocks, so the host's clock sees the wait. On CUDA (NCCL)
// wait() only makes the compute stream wait for the collective and returns at once: the host's
// clock would see nothing. There the stopwatch records CUDA events on the compute stream -- at
// Start (backward is done and every bucket launched) and at Stop (every all-reduce waited for) --
// and reads their elapsed GPU time one step later, when they are complete (cudaEventQuery: never
// a synchronisation). A step whose events are not complete by then is not reported.
// The CUDA half is compiled only against a CUDA LibTorch (DTRUN_WITH_NCCL, worker/torch_compat.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

namespace dtrun::worker {

class SyncStopwatch {
 public:
  struct Lap {
    int64_t steps_ago = 0;  // 0: the step just synced (CPU); 1: the one before (CUDA)
    double wait_s = 0;      // from Start to Stop
    double step_s = 0;      // from the previous lap's Stop to this one's (0: none before it)
  };

  explicit SyncStopwatch(bool cuda);
  ~SyncStopwatch();
  SyncStopwatch(const SyncStopwatch&) = delete;
  SyncStopwatch& operator=(const SyncStopwatch&) = delete;

  void Start();
  void Stop();
  // The newest lap whose times are known after the last Stop; nullopt before one is (or, on CUDA,
  // when the GPU has not finished the step before yet).
  const std::optional<Lap>& newest() const { return newest_; }

 private:
  struct CudaLaps;  // sync_stopwatch.cc; null on CPU
  using Clock = std::chrono::steady_clock;

  std::unique_ptr<CudaLaps> cuda_;
  Clock::time_point started_{};
  Clock::time_point last_stop_{};
  std::optional<Lap> newest_;
};

}  // namespace dtrun::worker
