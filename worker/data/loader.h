// The input pipeline: N threads read, decode (DCT-scaled when the crop allows), crop, resize and
// flip samples into uint8 NHWC batches, delivered in order through a bounded window (a thread
// never runs more than `max_batches_ahead` batches ahead of the consumer: back-pressure, not
// memory growth). Per-sample randomness comes from (seed, epoch, index), so results do not
// depend on thread timing, and an epoch can start at any batch (resume). Undecodable samples are
// skipped, counted and logged, never fatal. Next() is for one consumer thread.
// A consumer that decodes JPEGs itself (on a GPU: worker/device_batch.h) asks for them encoded:
// they come with the crop box and flip the loader would have used, and only the other samples are
// decoded here.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/checked_mutex.h"
#include "base/uninitialized_allocator.h"
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
  // > 0: JPEGs that any decoder takes (ImageInfo::plain_ycbcr) of at most this many pixels are
  // handed on encoded (Batch::encoded) instead of decoded, as many of them as
  // Loader::SetHandOnShare says. Training and validation alike: the box is the random crop or the
  // centre crop.
  int64_t hand_on_jpegs_up_to_pixels = 0;
};

// A JPEG handed on undecoded, with the augmentation the loader drew for it.
struct EncodedSample {
  int slot = 0;           // position in the batch
  std::string bytes;
  int width = 0, height = 0;  // from the header
  Box box;                // the crop, integer pixel coordinates of the full-size image
  bool flip = false;
};

struct Batch {
  int64_t epoch = 0;
  size_t index = 0;       // batch number within the epoch
  int count = 0;          // samples in it (fewer than batch_size at the end or after skips)
  int image_size = 0;
  // count × image_size × image_size × 3 (less what is in `encoded`); not zeroed when grown: the
  // loader writes every byte.
  std::vector<uint8_t, UninitializedAllocator<uint8_t>> pixels;
  std::vector<int64_t> labels;
  // With LoaderOptions::hand_on_jpegs_up_to_pixels: the samples left encoded, and the slot of each
  // image in `pixels`. Both empty otherwise (`pixels` then holds every sample in order).
  std::vector<EncodedSample> encoded;
  std::vector<int> pixel_slots;
  int skipped = 0;        // undecodable samples left out of this batch
  double work_seconds = 0;  // decode + augment time spent on it (all threads)
  double decode_seconds = 0;  // of it, decoding and resizing the images in `pixels`
};

class Loader {
 public:
  Loader(const Dataset& dataset, LoaderOptions options);
  ~Loader();  // stops the threads

  // Begins `epoch` at batch `start_batch` (0, or a resumed position).
  void StartEpoch(int64_t epoch, size_t start_batch = 0);
  // The next batch in order; nullopt when the epoch is done.
  std::optional<Batch> Next();

  // The share (0..1, default 1) of the JPEGs that could be handed on that are: the consumer
  // balances its decoder against these threads while they run. Which samples: a hash of (seed,
  // epoch, index) under the share, so a share picks the same ones on every run.
  void SetHandOnShare(double share);

  size_t batches_per_epoch() const;
  size_t samples_per_epoch() const { return indices_.size(); }
  int64_t skipped_total() const { return skipped_total_.load(); }

 private:
  void Work();
  Batch Build(int64_t epoch, size_t batch, const std::vector<size_t>& indices);
  bool CanProduce() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasNext() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HandsOn(int64_t epoch, size_t index) const;

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
  std::atomic<double> hand_on_share_{1.0};
  std::vector<std::thread> threads_;
};

// Decodes one sample as the loader does (DCT-scaled where the crop allows), then crops `box` (in
// full-size coordinates), resizes it to size × size and mirrors it if `flip`, into `dst` (HWC).
absl::Status DecodeAndCrop(Decoder& decoder, std::string_view bytes, const Box& box, bool flip, int size,
                           uint8_t* dst);

// ImageNet normalisation constants (RGB), as torchvision's Normalize.
inline constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

}  // namespace dtrun::data
