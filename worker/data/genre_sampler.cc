#include "worker/data/genre_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace dtrun::data {

GenreSampler::GenreSampler(int genres, const std::vector<int>& item_genre, const std::vector<double>& item_weight)
    : genre_begin_(static_cast<size_t>(genres) + 1, 0),
      genre_mass_(static_cast<size_t>(genres), 0.0),
      log_genre_mass_(static_cast<size_t>(genres)) {
  for (int g : item_genre) ++genre_begin_[static_cast<size_t>(g) + 1];
  std::partial_sum(genre_begin_.begin(), genre_begin_.end(), genre_begin_.begin());
  by_genre_.resize(item_genre.size());
  cumulative_.resize(item_genre.size());
  std::vector<int64_t> next(genre_begin_.begin(), genre_begin_.end() - 1);
  for (size_t i = 0; i < item_genre.size(); ++i) {
    const int g = item_genre[i];
    const int64_t at = next[g]++;
    by_genre_[at] = static_cast<int>(i);
    genre_mass_[g] += item_weight[i];
    cumulative_[at] = genre_mass_[g];
  }
  for (size_t g = 0; g < genre_mass_.size(); ++g) log_genre_mass_[g] = std::log(genre_mass_[g]);  // -inf if empty
}

int GenreSampler::DrawItemOfGenre(int genre, std::mt19937_64& rng) const {
  const auto begin = cumulative_.begin() + genre_begin_[genre], end = cumulative_.begin() + genre_begin_[genre + 1];
  const double x = std::uniform_real_distribution<double>(0.0, genre_mass_[genre])(rng);
  const auto it = std::min(std::upper_bound(begin, end, x), end - 1);  // x == mass by rounding
  return by_genre_[it - cumulative_.begin()];
}

std::vector<int> GenreSampler::Sample(const std::vector<double>& genre_logits,
                                      const std::function<double(int)>& item_logit, int n, std::mt19937_64& rng) const {
  // The genres' share of the candidates: exp(logit) · mass, as a running sum (max-shifted). An
  // empty genre's log mass is -inf: it adds nothing.
  std::vector<double> running(genre_mass_.size());
  double top = -std::numeric_limits<double>::infinity();
  for (size_t g = 0; g < running.size(); ++g) top = std::max(top, genre_logits[g] + log_genre_mass_[g]);
  double sum = 0;
  for (size_t g = 0; g < running.size(); ++g) {
    sum += std::exp(genre_logits[g] + log_genre_mass_[g] - top);
    running[g] = sum;
  }
  // Distinct candidates in the order drawn (deterministic), until there are enough or the draws
  // stop finding new ones.
  const size_t wanted = static_cast<size_t>(n) * kCandidatesPerItem;
  const size_t max_draws = wanted * 16;
  std::uniform_real_distribution<double> uniform(0.0, sum);
  absl::flat_hash_set<int> seen;
  std::vector<std::pair<double, int>> keyed;
  std::extreme_value_distribution<double> gumbel(0.0, 1.0);
  for (size_t draws = 0; draws < max_draws && keyed.size() < wanted; ++draws) {
    const auto at = std::upper_bound(running.begin(), running.end(), uniform(rng));
    const int genre = static_cast<int>(std::min(at, running.end() - 1) - running.begin());
    if (genre_mass_[genre] <= 0) continue;  // only by rounding at the very end
    const int item = DrawItemOfGenre(genre, rng);
    if (!seen.insert(item).second) continue;
    keyed.push_back({item_logit(item) + gumbel(rng), item});
  }
  const size_t kept = std::min(keyed.size(), static_cast<size_t>(n));
  std::partial_sort(keyed.begin(), keyed.begin() + kept, keyed.end(), std::greater<>());
  std::vector<int> items(kept);
  for (size_t k = 0; k < kept; ++k) items[k] = keyed[k].second;
  return items;
}

}  // namespace dtrun::data
