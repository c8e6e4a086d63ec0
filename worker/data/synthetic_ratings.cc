#include "worker/data/synthetic_ratings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/genre_sampler.h"

namespace dtrun::data {
namespace {

struct Taste {
  std::vector<float> vectors;  // rows of `dims`
  std::vector<float> bias;
};

Taste RandomTaste(int rows, int dims, double bias_scale, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  Taste t;
  t.vectors.resize(static_cast<size_t>(rows) * dims);
  for (float& v : t.vectors) v = normal(rng) / std::sqrt(static_cast<float>(dims));
  t.bias.resize(static_cast<size_t>(rows));
  for (float& b : t.bias) b = static_cast<float>(bias_scale) * normal(rng);
  return t;
}

float Dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// MovieLens's movieIds are sparse (1..193609 for 9,742 movies): so are these.
int64_t ItemId(int item) { return 1 + static_cast<int64_t>(item) * 3 + item % 2; }

// The exact choice: the top-n of affinity + Gumbel noise over every item (sampling without
// replacement in proportion to exp(3·affinity)). O(items) per user.
class ExactChooser {
 public:
  ExactChooser(const Taste& items, int dims) : items_(items), dims_(dims), keyed_(items.bias.size()) {}

  std::vector<int> Choose(const float* user, std::uniform_int_distribution<int>& count, std::mt19937_64& rng) {
    for (size_t i = 0; i < keyed_.size(); ++i) {
      const float affinity = Dot(user, &items_.vectors[i * dims_], dims_) + items_.bias[i];
      keyed_[i] = {3.f * affinity + gumbel_(rng), static_cast<int>(i)};
    }
    const int n = count(rng);  // after the keys, as ever: a seed's file stays the same
    std::partial_sort(keyed_.begin(), keyed_.begin() + n, keyed_.end(), std::greater<>());
    std::vector<int> chosen(n);
    for (int k = 0; k < n; ++k) chosen[k] = keyed_[k].second;
    return chosen;
  }

 private:
  const Taste& items_;
  const int dims_;
  std::vector<std::pair<float, int>> keyed_;
  std::extreme_value_distribution<float> gumbel_{0.f, 1.f};
};

// Large catalogs: each item is in a genre and its taste is 0.8 · its genre's + 0.6 · its own (the
// same spread as the exact path's), so exp(3·(affinity + bias)) factors into the genre's part,
// the popularity exp(3·bias), and the item's own part, which GenreSampler draws in
// O(genres + n) per user. `items` holds the items' own tastes on entry and their whole tastes
// after.
class GenreChooser {
 public:
  static constexpr float kGenreShare = 0.8f, kOwnShare = 0.6f;

  GenreChooser(Taste& items, int dims, std::mt19937_64& rng)
      : own_(items.vectors),
        dims_(dims),
        genres_(RandomTaste(GenreCount(items.bias.size()), dims, 0.0, rng)),
        item_genre_(RandomGenres(items.bias.size(), static_cast<int>(genres_.bias.size()), rng)),
        sampler_(static_cast<int>(genres_.bias.size()), item_genre_, Popularity(items)) {
    for (size_t i = 0; i < item_genre_.size(); ++i) {
      const float* g = &genres_.vectors[static_cast<size_t>(item_genre_[i]) * dims];
      float* v = &items.vectors[i * dims];
      for (int k = 0; k < dims; ++k) v[k] = kGenreShare * g[k] + kOwnShare * v[k];
    }
  }

  std::vector<int> Choose(const float* user, std::uniform_int_distribution<int>& count, std::mt19937_64& rng) {
    const int n = count(rng);
    std::vector<double> genre_logits(static_cast<size_t>(sampler_.genres()));
    for (size_t g = 0; g < genre_logits.size(); ++g) {
      genre_logits[g] = 3.0 * kGenreShare * Dot(user, &genres_.vectors[g * dims_], dims_);
    }
    const auto own_logit = [&](int i) {
      return 3.0 * kOwnShare * Dot(user, &own_[static_cast<size_t>(i) * dims_], dims_);
    };
    return sampler_.Sample(genre_logits, own_logit, n, rng);
  }

 private:
  // About as many genres as items per genre.
  static int GenreCount(size_t items) { return std::max(2, static_cast<int>(std::lround(std::sqrt(items)))); }

  static std::vector<int> RandomGenres(size_t items, int genres, std::mt19937_64& rng) {
    std::uniform_int_distribution<int> genre(0, genres - 1);
    std::vector<int> of_item(items);
    for (int& g : of_item) g = genre(rng);
    return of_item;
  }

  static std::vector<double> Popularity(const Taste& items) {
    std::vector<double> weight(items.bias.size());
    for (size_t i = 0; i < weight.size(); ++i) weight[i] = std::exp(3.0 * items.bias[i]);
    return weight;
  }

  // In this order: each is made from the ones before it.
  const std::vector<float> own_;
  const int dims_;
  const Taste genres_;
  const std::vector<int> item_genre_;
  const GenreSampler sampler_;
};

}  // namespace

absl::Status WriteSyntheticRatings(const std::string& path, const SyntheticRatingsOptions& o) {
  if (o.users < 1 || o.items < 2 || o.min_per_user < 1 || o.max_per_user < o.min_per_user || o.taste_dims < 1) {
    return absl::InvalidArgumentError("make-ratings: need users >= 1, items >= 2, 1 <= min-per-user <= max-per-user");
  }
  std::mt19937_64 rng(o.seed ^ 0x5EED5EEDull);
  const int d = o.taste_dims;
  Taste users = RandomTaste(o.users, d, 0.3, rng), items = RandomTaste(o.items, d, 0.4, rng);
  std::optional<ExactChooser> exact;
  std::optional<GenreChooser> by_genre;
  if (o.items <= o.exact_items_limit) {
    exact.emplace(items, d);
  } else {
    by_genre.emplace(items, d, rng);
  }
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write; choose a writable path"));
  std::fputs("userId,movieId,rating,timestamp\n", f);
  std::uniform_int_distribution<int> per_user(o.min_per_user, std::min(o.max_per_user, o.items));
  std::normal_distribution<float> noise(0.f, static_cast<float>(o.noise));
  std::uniform_int_distribution<int64_t> gap(60, 86400);
  for (int u = 0; u < o.users; ++u) {
    const float* pu = &users.vectors[static_cast<size_t>(u) * d];
    std::vector<int> chosen = exact ? exact->Choose(pu, per_user, rng) : by_genre->Choose(pu, per_user, rng);
    int64_t t = 1'000'000'000 + static_cast<int64_t>(u) * 1000;
    std::shuffle(chosen.begin(), chosen.end(), rng);  // the order they were watched in
    for (int i : chosen) {
      const float affinity = Dot(pu, &items.vectors[static_cast<size_t>(i) * d], d);
      float stars = 2.9f + 1.6f * affinity + users.bias[u] + 0.5f * items.bias[i] + noise(rng);
      stars = std::clamp(std::round(stars * 2.f) / 2.f, 0.5f, 5.0f);
      t += gap(rng);
      std::fprintf(f, "%d,%lld,%.1f,%lld\n", u + 1, static_cast<long long>(ItemId(i)), stars, static_cast<long long>(t));
    }
  }
  const bool write_ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !write_ok) {
    std::remove(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(path, ": write failed (disk full?); free space and run again"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace dtrun::data
