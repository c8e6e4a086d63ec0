// The device-to-host copy of an in-memory snapshot on CUDA (docs/DESIGN.md, "Overlap with the
// next step"). A snapshot of a state on the GPU is copied into its slot on a side stream, ordered
// after the work already queued on the current stream (the optimizer step that made it), while
// the next step runs; the slot's pages are pinned (cudaHostRegister), so the copy is a DMA that
// takes no host core and no host sync in the step. Two phases:
//   - tensors that the next step changes before its optimizer step (the model's buffers: batch
//     norm's statistics) first; the current stream then waits for them on the GPU (an event, no
//     host wait), so the next forward cannot overwrite them before they are read;
//   - then the parameters and the optimizer state, which only the next optimizer step changes:
//     the snapshot's copier thread waits for them (Wait) before it hashes, and the trainer joins
//     that thread before its next optimizer step.
// The only CUDA code of snapshots, with DeviceMark below (snapshots on failure). Without a CUDA
// build every call copies at once.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"

namespace dtrun::worker {

class DeviceSnapshotCopy {
 public:
  DeviceSnapshotCopy();
  ~DeviceSnapshotCopy();
  DeviceSnapshotCopy(const DeviceSnapshotCopy&) = delete;
  DeviceSnapshotCopy& operator=(const DeviceSnapshotCopy&) = delete;

  // Whether `t` is copied by this class (a CUDA tensor in a CUDA build).
  static bool Takes(const torch::Tensor& t);
  // Copies `src` into `dst` (a view of host memory). `changes_before_optimizer_step`: a tensor of
  // the first phase. All of the first phase must come before any of the second.
  void Enqueue(const torch::Tensor& dst, const torch::Tensor& src, bool changes_before_optimizer_step);
  // After the last Enqueue.
  void Close();
  // Blocks the calling thread until every copy is done (at once if there were none).
  void Wait();
  // After Close: the current stream waits, on the GPU, for every copy, so what it queues next may
  // change the copied tensors with no host wait. False if nothing was copied by the GPU.
  bool OrderCurrentStreamAfter();
  // After Wait: the GPU's time from the first copy to the last (0 if there were none).
  double DeviceSeconds();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A point in the work queued on the current stream (an event): where the state armed for a
// failure is whole on the GPU (MemorySnapshots::Arm). The rescue copies that state out from any
// thread, ordered after this point alone: the current stream may be stuck behind a collective
// with a rank that is gone, and a copy queued there would wait for ever. Every wait is bounded.
// Without a CUDA build, or for a tensor not on a GPU, there is no point to wait for: the copies
// are done at once.
class DeviceMark {
 public:
  // On the current stream of `device`.
  explicit DeviceMark(const torch::Device& device);
  ~DeviceMark();
  DeviceMark(const DeviceMark&) = delete;
  DeviceMark& operator=(const DeviceMark&) = delete;

  // From any thread: dsts[i].copy_(srcs[i]) on a side stream once the GPU has passed the mark.
  // Waits at most `timeout_s` for the GPU to reach the mark and as long again for the copies:
  // DeadlineExceeded when it did not (the GPU stuck before the mark: the armed state never
  // existed whole), Internal when CUDA fails (a sticky error of the context).
  absl::Status CopyAfter(const std::vector<torch::Tensor>& dsts, const std::vector<torch::Tensor>& srcs,
                         double timeout_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Pins host memory for DMA (cudaHostRegister), extent by extent, and unpins it when destroyed:
// destroy it before the memory is unmapped. A failure is said once on stderr; the copies then go
// through pageable memory, slower and with a host sync, but correct. No-op without CUDA.
class HostPins {
 public:
  HostPins() = default;
  ~HostPins();
  HostPins(const HostPins&) = delete;
  HostPins& operator=(const HostPins&) = delete;
  // Pins [base, base + bytes), replacing a smaller extent pinned at the same base.
  void Pin(char* base, size_t bytes);

 private:
  struct Extent {
    char* base;
    size_t bytes;
  };
  std::vector<Extent> pinned_;
  [[maybe_unused]] bool failed_ = false;  // read by the CUDA build only
};

}  // namespace dtrun::worker
