// How the JPEG decoding of training batches is split between the GPU (nvJPEG,
// worker/device_batch.h) and the loader's threads, so that neither waits for the other. Each
// side's throughput is measured as it works (seconds per image, smoothed), and the GPU is given
// the share of the images that its throughput is of the two together: both then take about as
// long per batch. A GPU's hardware JPEG engines alone may not keep up with a ResNet-50 step; with
// the loader's threads beside them, which otherwise only read files, they do. A share the user
// gives (--gpu-decode-share) is kept as it is. Plain arithmetic, no LibTorch; one thread.
#pragma once

#include <optional>

namespace dtrun::worker {

class DecodeShare {
 public:
  // Before both sides are measured: the GPU gets most, the loader enough to be measured.
  static constexpr double kInitial = 0.8;
  static constexpr double kMin = 0.05;  // the GPU always gets some, so it stays measured
  static constexpr double kSmoothing = 0.1;  // weight of each new measurement

  explicit DecodeShare(int loader_threads, std::optional<double> fixed = std::nullopt);

  // A batch the loader built: its threads decoded `images` in `thread_seconds` of their time.
  void ObserveLoader(int images, double thread_seconds);
  // The GPU decoded (and cropped, resized) `images` in `seconds` of its decode stream's time.
  void ObserveDevice(int images, double seconds);

  // The share of JPEGs to hand to the GPU, in [kMin, 1] (or the fixed one).
  double share() const;
  bool fixed() const { return fixed_.has_value(); }
  // The smoothed measurements (none before the first): one loader thread's, and the GPU's decode
  // stream's, seconds per image.
  std::optional<double> loader_seconds_per_image() const { return loader_s_per_image_; }
  std::optional<double> device_seconds_per_image() const { return device_s_per_image_; }

 private:
  static void Smooth(std::optional<double>& average, double sample);

  int loader_threads_;
  std::optional<double> fixed_;
  std::optional<double> loader_s_per_image_, device_s_per_image_;
};

}  // namespace dtrun::worker
