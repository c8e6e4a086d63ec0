// A synthetic MovieLens-style ratings.csv with structure a model can learn (dtdata make-ratings):
// users and items have hidden taste vectors; each user rates the items that suit them best (with
// noise), so which items a user rates is predictable (ranking metrics), and the rating follows the
// same affinity plus user and item biases (RMSE). Ids are sparse like MovieLens's; timestamps grow
// per user, so the split by time holds out each user's latest ratings. Deterministic per seed.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dtrun::data {

struct SyntheticRatingsOptions {
  int users = 600;
  int items = 2000;
  int min_per_user = 20;   // ratings per user: uniform in [min, max]
  int max_per_user = 150;
  int taste_dims = 8;
  double noise = 0.35;     // of the rating, in stars
  uint64_t seed = 0;
};

// Writes userId,movieId,rating,timestamp lines with a header to `path` (atomically: temp + rename).
absl::Status WriteSyntheticRatings(const std::string& path, const SyntheticRatingsOptions& options);

}  // namespace dtrun::data
