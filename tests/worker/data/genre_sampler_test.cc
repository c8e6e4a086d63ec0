#include "worker/data/genre_sampler.h"

#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace dtrun::data {
namespace {

// 3 genres of 10 items, popularity and own logits that differ per item.
struct Catalog {
  std::vector<int> genre;
  std::vector<double> weight, own_logit;
  std::vector<double> genre_logits = {1.5, 0.0, -1.0};
  Catalog() {
    for (int i = 0; i < 30; ++i) {
      genre.push_back(i % 3);
      weight.push_back(std::exp(0.1 * (i % 7)));
      own_logit.push_back(0.3 * ((i * 7) % 11) - 1.5);
    }
  }
  // The distribution of a single item: the target, or the proposal alone (without own logits).
  std::vector<double> Distribution(bool with_own) const {
    std::vector<double> p(genre.size());
    double sum = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = std::exp(genre_logits[genre[i]] + (with_own ? own_logit[i] : 0.0)) * weight[i];
      sum += p[i];
    }
    for (double& x : p) x /= sum;
    return p;
  }
};

double TotalVariation(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::abs(a[i] - b[i]);
  return d / 2;
}

TEST(GenreSamplerTest, OneItemFollowsTheTargetFarCloserThanThePopularityAndGenreProposal) {
  const Catalog c;
  const GenreSampler sampler(3, c.genre, c.weight);
  std::mt19937_64 rng(11);
  std::vector<double> seen(c.genre.size(), 0);
  const int trials = 40'000;
  for (int t = 0; t < trials; ++t) {
    const std::vector<int> one = sampler.Sample(
        c.genre_logits, [&](int i) { return c.own_logit[i]; }, 1, rng);
    ASSERT_EQ(one.size(), 1u);
    seen[one[0]] += 1.0 / trials;
  }
  const std::vector<double> target = c.Distribution(true), proposal = c.Distribution(false);
  const double ours = TotalVariation(seen, target), proposal_only = TotalVariation(proposal, target);
  // Resampling 4 candidates moves most of the way from the proposal to the target; the rest is
  // the price of not scoring every item (sampling noise here is ~0.01).
  EXPECT_LT(ours, 0.35 * proposal_only) << "ours " << ours << ", proposal " << proposal_only;
}

TEST(GenreSamplerTest, ManyItemsAreDistinctAndEveryOneIsFoundWhenAllAreAskedFor) {
  const Catalog c;
  const GenreSampler sampler(3, c.genre, c.weight);
  std::mt19937_64 rng(5);
  const std::vector<int> all = sampler.Sample(
      c.genre_logits, [&](int i) { return c.own_logit[i]; }, 30, rng);
  EXPECT_EQ(std::set<int>(all.begin(), all.end()).size(), 30u);
  const std::vector<int> some = sampler.Sample(
      c.genre_logits, [&](int i) { return c.own_logit[i]; }, 12, rng);
  EXPECT_EQ(some.size(), 12u);
  EXPECT_EQ(std::set<int>(some.begin(), some.end()).size(), 12u);
  for (int i : some) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, 30);
  }
}

TEST(GenreSamplerTest, AGenreWithoutItemsIsNeverDrawnWhateverItsLogit) {
  const GenreSampler sampler(3, {0, 0, 2, 2}, {1, 2, 1, 2});  // genre 1 is empty
  std::mt19937_64 rng(3);
  for (int t = 0; t < 100; ++t) {
    const std::vector<int> two = sampler.Sample(
        {0.0, 50.0, 0.0}, [](int) { return 0.0; }, 2, rng);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_NE(two[0], two[1]);
  }
}

TEST(GenreSamplerTest, ASeedGivesTheSameItems) {
  const Catalog c;
  const GenreSampler sampler(3, c.genre, c.weight);
  std::mt19937_64 a(9), b(9);
  const auto own = [&](int i) { return c.own_logit[i]; };
  EXPECT_EQ(sampler.Sample(c.genre_logits, own, 7, a), sampler.Sample(c.genre_logits, own, 7, b));
}

}  // namespace
}  // namespace dtrun::data
