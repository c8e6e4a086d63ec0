// A trace of a window of training steps by PyTorch's own profiler (Kineto: the host's ATen ops
// and CUDA runtime calls, the GPU's kernels and copies), written as a Chrome trace. The Python
// reference writes the same format (bench/gpu/train_ref_gpu.py --profile-out), and
// bench/gpu/trace_summary.py reads both: where a step's time goes, side by side. Needs a CUDA build
// of LibTorch 2.x; elsewhere Begin says why not and nothing is traced.
#pragma once

#include <cstdint>
#include <string>

namespace dtrun::worker {

class StepProfiler {
 public:
  // Traces steps [first, first + count) of this process into `path` (nothing if count <= 0).
  StepProfiler(std::string path, int64_t first, int64_t count);
  ~StepProfiler();
  // Before the step with this index (0, 1, ... in this process): starts or ends the trace.
  void BeforeStep(int64_t step);

 private:
  void Begin();
  void End();
  std::string path_;
  int64_t first_, count_;
  bool on_ = false;
};

}  // namespace dtrun::worker
