// A synthetic MovieLens-style ratings.csv with structure a model can learn (dtdata make-ratings):
// users and items have hidden taste vectors; each user rates the items that suit them best (with
// noise), so which items a user rates is predictable (ranking metrics), and the rating follows the
// same affinity plus user and item biases (RMSE). Ids are sparse like MovieLens's; timestamps grow
// per user, so the split by time holds out each user's latest ratings. Deterministic per seed.
// Catalogs above `exact_items_limit` items (millions, for large embedding tables) have genres,
// which make them as fast to write as small ones.
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
  // Up to this many items every user scores every item (exact, O(users × items)); above it items
  // come in genres and a user's choice costs O(genres + ratings) (worker/data/genre_sampler.h).
  int exact_items_limit = 100'000;
};

// Writes userId,movieId,rating,timestamp lines with a header to `path` (atomically: temp + rename).
absl::Status WriteSyntheticRatings(const std::string& path, const SyntheticRatingsOptions& options);

}  // namespace dtrun::data
