// The input pipeline: N threads read, decode (DCT-scaled when the crop allows), crop, resize and
// flip samples into uint8 NHWC batches, delivered in order through a bounded window (a thread
// never runs more than `max_batches_ahead` batches ahead of the consumer: back-pressure, not
// memory growth). Per-sample randomness comes from (seed, epoch, index), so results do not
// depend on thread timing, and an epoch can start at any batch (resume). Undecodable samples are
// skipped, counted and logged, never fatal. Next() is for one consumer thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "base/checked_mutex.h"
#include "worker/data/dataset.h"
#include "worker/data/decode.h"
#include "worker/data/sampler.h"

namespace dtrun::data {

struct LoaderOptions {
  int batch_size = 32;
  int threads = 2;
  int max_batches_ahead = 4;
  int image_size = 224;   // output side
  bool train = true;      // RandomResizedCrop + flip; else resize + centre crop
  uint64_t seed = 0;      // augmentation randomness
  SamplerOptions sampler;
  // Images whose header claims more pixels are skipped (and counted) before decoding.
  int64_t max_image_pixels = Decoder::kDefaultMaxPixels;
};

struct Batch {
  int64_t epoch = 0;
  size_t index = 0;       // batch number within the epoch
  int count = 0;          // samples in it (fewer than batch_size at the end or after skips)
  int image_size = 0;
  std::vector<uint8_t> pixels;  // count × image_size × image_size × 3
  std::vector<int64_t> labels;
  int skipped = 0;        // undecodable samples left out of this batch
  double work_seconds = 0;  // decode + augment time spent on it (all threads)
};

class Loader {
 public:
  Loader(const Dataset& dataset, LoaderOptions options);
  ~Loader();  // stops the threads

  // Begins `epoch` at batch `start_batch` (0, or a resumed position).
  void StartEpoch(int64_t epoch, size_t start_batch = 0);
  // The next batch in order; nullopt when the epoch is done.
  std::optional<Batch> Next();

  size_t batches_per_epoch() const;
  size_t samples_per_epoch() const { return indices_.size(); }
  int64_t skipped_total() const { return skipped_total_.load(); }

 private:
  void Work();
  Batch Build(int64_t epoch, size_t batch, const std::vector<size_t>& indices);
  bool CanProduce() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasNext() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Dataset& dataset_;
  const LoaderOptions options_;
  std::vector<size_t> indices_;  // this rank's samples for the current epoch

  CheckedMutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by StartEpoch: stale work is dropped
  size_t next_to_build_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_to_deliver_ ABSL_GUARDED_BY(mu_) = 0;
  size_t end_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<size_t, Batch> ready_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> skipped_total_{0};
  std::vector<std::thread> threads_;
};

// ImageNet normalisation constants (RGB), as torchvision's Normalize.
inline constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

}  // namespace dtrun::data
