// Which items a synthetic user rates when the catalog is too large to score every item for every
// user (dtdata make-ratings above SyntheticRatingsOptions::exact_items_limit items). Items belong
// to genres; the target is the exact sampler's: n distinct items, without replacement, each in
// proportion to exp(genre_logit[genre(i)]) · weight(i) · exp(item_logit(i)). Drawing a candidate
// costs O(log genres + log genre size) (the genre by the user's logits, the item by its weight),
// and the candidates are then resampled by their own logit with Gumbel keys (sampling-importance-
// resampling), so a user costs O(genres + n), not O(items).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace dtrun::data {

class GenreSampler {
 public:
  // item_genre[i] in [0, genres); item_weight[i] > 0 and finite.
  GenreSampler(int genres, const std::vector<int>& item_genre, const std::vector<double>& item_weight);

  int genres() const { return static_cast<int>(genre_mass_.size()); }

  // Up to n distinct items (fewer only when the draws keep finding the same ones: a user whose
  // logits put nearly all mass on a few items), best-keyed first. genre_logits has genres()
  // entries; item_logit(i) is called once per distinct candidate.
  std::vector<int> Sample(const std::vector<double>& genre_logits, const std::function<double(int)>& item_logit, int n,
                          std::mt19937_64& rng) const;

  // Candidates drawn per item returned: more is closer to the target and slower.
  static constexpr int kCandidatesPerItem = 4;

 private:
  int DrawItemOfGenre(int genre, std::mt19937_64& rng) const;

  std::vector<int> by_genre_;         // items ordered by genre
  std::vector<int64_t> genre_begin_;  // genre g's items: by_genre_[genre_begin_[g], genre_begin_[g + 1])
  std::vector<double> cumulative_;    // running weight within a genre, aligned with by_genre_
  std::vector<double> genre_mass_;    // the total weight of each genre
  std::vector<double> log_genre_mass_;
};

}  // namespace dtrun::data
