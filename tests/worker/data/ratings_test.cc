#include "worker/data/ratings.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "worker/data/synthetic_ratings.h"

namespace dtrun::data {
namespace {

absl::StatusOr<RatingsTable> Parse(const std::string& text, size_t chunk = 1 << 20) {
  RatingsParser parser;
  for (size_t i = 0; i < text.size(); i += chunk) parser.Feed(std::string_view(text).substr(i, chunk));
  return std::move(parser).Finish("ratings.csv");
}

TEST(RatingsTest, MalformedLinesAreCountedAndNamedByLineNumberAndTheRestIsRead) {
  const std::string text =
      "userId,movieId,rating,timestamp\r\n"
      "1,10,4.0,100\r\n"
      "x,10,4.0,100\n"          // line 3
      "2,-5,3.0,100\n"          // line 4: id out of range
      "2,99999999999,3.0,100\n" // line 5: id out of range
      "2,11,nan,100\n"          // line 6
      "2,11,11,100\n"           // line 7: rating above 10
      "2,11,3.5\n"              // line 8: 3 fields
      "2,11,3.5,100,extra\n"    // line 9
      "2,11,3.5,-1\n"           // line 10
      "\n"
      "2,11,3.5,200\n"
      "2,11,1.0,300";           // a repeat of (2, 11), no final newline
  absl::StatusOr<RatingsTable> t = Parse(text);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ratings.size(), 2u);
  EXPECT_EQ(t->malformed, 8);
  EXPECT_EQ(t->duplicates, 1);
  ASSERT_EQ(t->malformed_examples.size(), 8u);
  EXPECT_EQ(t->malformed_examples[0].rfind("line 3: ", 0), 0u) << t->malformed_examples[0];
  EXPECT_NE(t->malformed_examples[1].find("line 4: id out of range"), std::string::npos);
  EXPECT_NE(t->malformed_examples[2].find("line 5: id out of range"), std::string::npos);
  EXPECT_NE(t->malformed_examples[3].find("line 6: rating 'nan'"), std::string::npos);
  EXPECT_NE(t->malformed_examples[5].find("line 8: 3 fields"), std::string::npos);
  EXPECT_NE(t->malformed_examples[7].find("line 10: timestamp"), std::string::npos);
  EXPECT_EQ(t->user_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(t->item_ids, (std::vector<int64_t>{10, 11}));
  EXPECT_FLOAT_EQ(t->ratings[1].rating, 3.5f);
  EXPECT_NE(t->Summary("r.csv").find("8 malformed lines skipped (line 3:"), std::string::npos) << t->Summary("r.csv");
}

TEST(RatingsTest, ChunkBoundariesDoNotChangeWhatIsRead) {
  std::string text = "userId,movieId,rating,timestamp\n";
  for (int i = 0; i < 300; ++i) text += std::to_string(i % 17) + "," + std::to_string(i) + ",3.5," + std::to_string(i) + "\n";
  text += std::string(1000, '7') + "\n";  // an overlong line
  absl::StatusOr<RatingsTable> whole = Parse(text);
  ASSERT_TRUE(whole.ok());
  for (size_t chunk : {1u, 2u, 7u, 255u, 256u, 257u}) {
    absl::StatusOr<RatingsTable> t = Parse(text, chunk);
    ASSERT_TRUE(t.ok()) << chunk;
    EXPECT_EQ(t->ratings.size(), 300u) << chunk;
    EXPECT_EQ(t->malformed, 1) << chunk;
    EXPECT_NE(t->malformed_examples[0].find("line 302: longer than 256 bytes"), std::string::npos)
        << t->malformed_examples[0];
  }
}

TEST(RatingsTest, EmptyHeaderOnlyAndAllBadFilesAreErrorsThatSayWhatToGive) {
  for (const std::string& text : {std::string(), std::string("userId,movieId,rating,timestamp\n"), std::string("\n\n")}) {
    absl::StatusOr<RatingsTable> t = Parse(text);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("holds no ratings"), std::string::npos) << t.status();
    EXPECT_NE(t.status().message().find("dtdata make-ratings"), std::string::npos) << t.status();
  }
  absl::StatusOr<RatingsTable> bad = Parse("a,b,c,d\n1;2;3;4\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("none of its 1 lines is a valid rating (line 2:"), std::string::npos)
      << bad.status();
  EXPECT_EQ(ReadRatingsCsv("/nonexistent/ratings.csv").status().code(), absl::StatusCode::kNotFound);
}

TEST(RatingsTest, TheSplitHoldsOutEachUsersLatestRatingsAndIsTheSameEveryTime) {
  // User 1: 10 ratings at times 10..1; user 2: one rating (all train).
  std::string text;
  for (int i = 0; i < 10; ++i) text += "1," + std::to_string(100 + i) + ",3," + std::to_string(10 - i) + "\n";
  text += "2,100,5,1\n";
  absl::StatusOr<RatingsTable> t = Parse(text);
  ASSERT_TRUE(t.ok());
  RatingsSplit s = SplitByTime(*t, 0.2);
  ASSERT_EQ(s.test.size(), 2u);
  EXPECT_EQ(t->item_ids[s.test[0].item], 101);  // times 9 and 10: items 101 and 100
  EXPECT_EQ(t->item_ids[s.test[1].item], 100);
  ASSERT_EQ(s.ranking_target.size(), 1u);
  EXPECT_EQ(t->item_ids[s.ranking_target[0].item], 100);
  EXPECT_EQ(s.train.size(), 9u);
  RatingsSplit again = SplitByTime(*t, 0.2);
  EXPECT_EQ(again.test[0].item, s.test[0].item);
}

TEST(RatingsTest, SampledNegativesAreUnratedDistinctAndDeterministic) {
  const std::vector<int32_t> rated = {0, 3, 5, 7, 8};
  std::vector<int32_t> a = SampleUnratedItems(4, rated, 50, 20, 9), b = SampleUnratedItems(4, rated, 50, 20, 9);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 20u);
  std::set<int32_t> distinct(a.begin(), a.end());
  EXPECT_EQ(distinct.size(), a.size());
  for (int32_t i : a) EXPECT_FALSE(std::binary_search(rated.begin(), rated.end(), i)) << i;
  // Fewer unrated items than asked: all of them.
  EXPECT_EQ(SampleUnratedItems(4, rated, 10, 99, 9).size(), 5u);
  EXPECT_TRUE(SampleUnratedItems(4, {0, 1}, 2, 99, 9).empty());
}

TEST(RatingsTest, SyntheticRatingsHaveTheMovieLensLayoutAndReadBackWhole) {
  const std::string path = dtrun::testing::MakeTempDir() + "/ratings.csv";
  SyntheticRatingsOptions o;
  o.users = 50;
  o.items = 300;
  ASSERT_TRUE(WriteSyntheticRatings(path, o).ok());
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header, "userId,movieId,rating,timestamp");
  absl::StatusOr<RatingsTable> t = ReadRatingsCsv(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->malformed, 0);
  EXPECT_EQ(t->num_users(), 50);
  EXPECT_GE(t->ratings.size(), 50u * 20);
  for (const Rating& r : t->ratings) {
    EXPECT_GE(r.rating, 0.5f);
    EXPECT_LE(r.rating, 5.0f);
  }
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Tests and benchmarks name their data by its options and seed: a change to the generator that
// moved these would silently change every recorded number.
TEST(RatingsTest, SyntheticRatingsOfASeedNeverChange) {
  const std::string path = dtrun::testing::MakeTempDir() + "/ratings.csv";
  SyntheticRatingsOptions o;
  o.users = 2;
  o.items = 40;
  o.min_per_user = o.max_per_user = 3;
  ASSERT_TRUE(WriteSyntheticRatings(path, o).ok());
  EXPECT_EQ(ReadAll(path),
            "userId,movieId,rating,timestamp\n"
            "1,95,3.5,1000019316\n1,115,4.5,1000102246\n1,7,3.0,1000163744\n"
            "2,59,3.5,1000009931\n2,101,5.0,1000068350\n2,1,5.0,1000119162\n");
}

TEST(RatingsTest, LargeCatalogsComeInGenresWithEveryUsersCountAndNoPairTwice) {
  const std::string dir = dtrun::testing::MakeTempDir();
  SyntheticRatingsOptions o;
  o.users = 300;
  o.items = 5000;
  o.min_per_user = 5;
  o.max_per_user = 40;
  o.exact_items_limit = 1000;  // the genre path, at a size a test can afford
  ASSERT_TRUE(WriteSyntheticRatings(dir + "/a.csv", o).ok());
  ASSERT_TRUE(WriteSyntheticRatings(dir + "/b.csv", o).ok());
  EXPECT_EQ(ReadAll(dir + "/a.csv"), ReadAll(dir + "/b.csv"));
  absl::StatusOr<RatingsTable> t = ReadRatingsCsv(dir + "/a.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->malformed, 0);
  EXPECT_EQ(t->duplicates, 0);
  EXPECT_EQ(t->num_users(), 300);
  std::vector<int> per_user(300, 0);
  for (const Rating& r : t->ratings) ++per_user[r.user];
  EXPECT_GE(*std::min_element(per_user.begin(), per_user.end()), 5);
  EXPECT_LE(*std::max_element(per_user.begin(), per_user.end()), 40);
  // Popular and niche items, as in MovieLens: far from every item rated equally often.
  EXPECT_GT(t->num_items(), 2000);
  std::vector<int> per_item(t->num_items(), 0);
  for (const Rating& r : t->ratings) ++per_item[r.item];
  std::sort(per_item.rbegin(), per_item.rend());
  const double mean = static_cast<double>(t->ratings.size()) / t->num_items();
  EXPECT_GT(per_item[per_item.size() / 100], 3 * mean);
}

}  // namespace
}  // namespace dtrun::data
