// torch.utils.data.DistributedSampler semantics: every epoch a permutation seeded by seed + epoch
// (or the identity), padded by wrapping around to a multiple of the world size, and rank r takes
// positions r, r + world, r + 2·world, …, so every sample is seen once per epoch across ranks
// (a few twice for padding). `drop_last` trims instead of padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrun::data {

struct SamplerOptions {
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool pad = true;  // false (validation): ranks get uneven shares, no sample twice
};

// The dataset indices rank `options.rank` visits in `epoch`, in order.
std::vector<size_t> DistributedIndices(size_t dataset_size, int64_t epoch, const SamplerOptions& options);

}  // namespace dtrun::data
