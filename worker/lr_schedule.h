// Learning-rate schedules (no LibTorch): step (×gamma every N epochs, main.py's default), cosine,
// with linear warm-up, and the linear scaling rule (lr × global batch / 256).
#pragma once

#include <cmath>
#include <string>

namespace dtrun::worker {

enum class LrShape { kStep, kCosine };

struct LrSchedule {
  LrShape kind = LrShape::kStep;
  double base_lr = 0.1;
  double gamma = 0.1;
  int step_epochs = 30;
  double warmup_epochs = 0;
  int total_epochs = 90;

  // The learning rate at fractional epoch `e` (epoch + step / steps_per_epoch).
  double At(double e) const {
    if (warmup_epochs > 0 && e < warmup_epochs) return base_lr * (e + 1e-9) / warmup_epochs;
    if (kind == LrShape::kCosine) {
      double t = (e - warmup_epochs) / std::max(1e-9, total_epochs - warmup_epochs);
      return 0.5 * base_lr * (1 + std::cos(M_PI * std::min(1.0, t)));
    }
    return base_lr * std::pow(gamma, std::floor(e / step_epochs));
  }
};

// Goyal et al.: lr for a global batch, from the lr for batch 256.
inline double ScaledLr(double lr_per_256, int global_batch) { return lr_per_256 * global_batch / 256.0; }

}  // namespace dtrun::worker
