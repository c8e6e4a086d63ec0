#include "worker/data/synthetic_ratings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"

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

}  // namespace

absl::Status WriteSyntheticRatings(const std::string& path, const SyntheticRatingsOptions& o) {
  if (o.users < 1 || o.items < 2 || o.min_per_user < 1 || o.max_per_user < o.min_per_user || o.taste_dims < 1) {
    return absl::InvalidArgumentError("make-ratings: need users >= 1, items >= 2, 1 <= min-per-user <= max-per-user");
  }
  std::mt19937_64 rng(o.seed ^ 0x5EED5EEDull);
  const int d = o.taste_dims;
  Taste users = RandomTaste(o.users, d, 0.3, rng), items = RandomTaste(o.items, d, 0.4, rng);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write; choose a writable path"));
  std::fputs("userId,movieId,rating,timestamp\n", f);
  std::uniform_int_distribution<int> per_user(o.min_per_user, std::min(o.max_per_user, o.items));
  std::extreme_value_distribution<float> gumbel(0.f, 1.f);
  std::normal_distribution<float> noise(0.f, static_cast<float>(o.noise));
  std::uniform_int_distribution<int64_t> gap(60, 86400);
  std::vector<std::pair<float, int>> keyed(static_cast<size_t>(o.items));
  for (int u = 0; u < o.users; ++u) {
    const float* pu = &users.vectors[static_cast<size_t>(u) * d];
    // Which items: the top-n of affinity + Gumbel noise (sampling without replacement, in
    // proportion to exp(3·affinity)).
    for (int i = 0; i < o.items; ++i) {
      const float affinity = Dot(pu, &items.vectors[static_cast<size_t>(i) * d], d) + items.bias[i];
      keyed[i] = {3.f * affinity + gumbel(rng), i};
    }
    const int n = per_user(rng);
    std::partial_sort(keyed.begin(), keyed.begin() + n, keyed.end(), std::greater<>());
    int64_t t = 1'000'000'000 + static_cast<int64_t>(u) * 1000;
    std::shuffle(keyed.begin(), keyed.begin() + n, rng);  // the order they were watched in
    for (int k = 0; k < n; ++k) {
      const int i = keyed[k].second;
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
