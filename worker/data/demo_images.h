// Small learnable image sets: coloured shapes on noise (10 classes: 5 shapes × 2 colour families),
// for the README's main job, tests and decode benchmarks.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dtrun::data {

struct DemoOptions {
  int classes = 10;
  int train_per_class = 64;
  int val_per_class = 16;
  int width = 160;
  int height = 160;
  int quality = 90;
  uint64_t seed = 0;
};

// Writes OUT/train/<class>/*.jpg and OUT/val/<class>/*.jpg. Returns images written.
absl::StatusOr<size_t> MakeDemoImageFolder(const std::string& out, const DemoOptions& options);

}  // namespace dtrun::data
