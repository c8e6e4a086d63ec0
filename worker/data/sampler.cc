#include "worker/data/sampler.h"

#include <numeric>
#include <random>

namespace dtrun::data {

std::vector<size_t> DistributedIndices(size_t n, int64_t epoch, const SamplerOptions& o) {
  if (n == 0 || o.world_size < 1) return {};
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (o.shuffle) {
    std::mt19937_64 rng(o.seed + static_cast<uint64_t>(epoch));
    for (size_t i = n; i > 1; --i) {  // Fisher-Yates; std::shuffle's output is not portable
      std::swap(order[i - 1], order[rng() % i]);
    }
  }
  const size_t world = static_cast<size_t>(o.world_size);
  size_t total = o.drop_last ? n / world * world : o.pad ? (n + world - 1) / world * world : n;
  if (total > n) {
    for (size_t i = n; i < total; ++i) order.push_back(order[(i - n) % n]);
  }
  order.resize(total);
  std::vector<size_t> mine;
  mine.reserve(total / world);
  for (size_t i = static_cast<size_t>(o.rank); i < total; i += world) mine.push_back(order[i]);
  return mine;
}

}  // namespace dtrun::data
