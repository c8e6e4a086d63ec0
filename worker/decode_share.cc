#include "worker/decode_share.h"

#include <algorithm>

namespace dtrun::worker {

DecodeShare::DecodeShare(int loader_threads, std::optional<double> fixed)
    : loader_threads_(std::max(1, loader_threads)), fixed_(fixed) {
  if (fixed_) fixed_ = std::clamp(*fixed_, 0.0, 1.0);
}

void DecodeShare::Smooth(std::optional<double>& average, double sample) {
  average = average ? (1 - kSmoothing) * *average + kSmoothing * sample : sample;
}

void DecodeShare::ObserveLoader(int images, double thread_seconds) {
  if (images > 0 && thread_seconds > 0) Smooth(loader_s_per_image_, thread_seconds / images);
}

void DecodeShare::ObserveDevice(int images, double seconds) {
  if (images > 0 && seconds > 0) Smooth(device_s_per_image_, seconds / images);
}

double DecodeShare::share() const {
  if (fixed_) return *fixed_;
  if (!loader_s_per_image_ || !device_s_per_image_) return kInitial;
  const double device_rate = 1 / *device_s_per_image_;
  const double loader_rate = loader_threads_ / *loader_s_per_image_;
  return std::clamp(device_rate / (device_rate + loader_rate), kMin, 1.0);
}

}  // namespace dtrun::worker
