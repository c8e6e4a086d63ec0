// MovieLens-style explicit ratings for the recommendation example: a bounded, line-numbered reader
// of `ratings.csv` (userId,movieId,rating,timestamp, as in ml-latest-small; the real files read
// unchanged), a deterministic per-user train/test split by time, and negatives for ranking metrics.
// No LibTorch. Every byte of the file is untrusted: a bad line is counted and reported by number,
// never a crash, and memory is bounded by what the file holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrun::data {

struct Rating {
  int32_t user = 0;  // dense index into RatingsTable::user_ids
  int32_t item = 0;  // dense index into RatingsTable::item_ids
  float rating = 0;
  int64_t timestamp = 0;
};

struct RatingsTable {
  std::vector<Rating> ratings;                 // in file order, duplicates of a (user, item) pair dropped
  std::vector<int64_t> user_ids, item_ids;     // dense index → the id in the file
  int64_t lines = 0;                           // data lines seen (not the header, not blank lines)
  int64_t malformed = 0;                       // lines skipped as malformed
  int64_t duplicates = 0;                      // later ratings of a pair already rated, skipped
  std::vector<std::string> malformed_examples; // "line N: why", the first kMaxExamples
  static constexpr size_t kMaxExamples = 10;

  int32_t num_users() const { return static_cast<int32_t>(user_ids.size()); }
  int32_t num_items() const { return static_cast<int32_t>(item_ids.size()); }
  // One line for the log: counts, and the first bad lines by number when there were any.
  std::string Summary(const std::string& name) const;
};

// The range a rating must lie in; anything else (and NaN, inf) is a malformed line.
inline constexpr float kMinRating = 0.0f, kMaxRating = 10.0f;
// Lines longer than this are malformed (a real line is under 40 bytes); the reader never holds more.
inline constexpr size_t kMaxRatingsLineBytes = 256;

// Incremental parser: feed the file in chunks of any size, then Finish. A first line that starts with a
// letter is a header and skipped; blank lines are skipped; ids must be whole numbers in
// [0, 2^31), the rating a number in [kMinRating, kMaxRating], the timestamp a whole number ≥ 0.
class RatingsParser {
 public:
  void Feed(std::string_view chunk);
  // InvalidArgument when the input held no valid rating (empty file, only a header, all malformed).
  absl::StatusOr<RatingsTable> Finish(const std::string& name) &&;

 private:
  void Line(std::string_view line);
  void Malformed(const std::string& why);

  RatingsTable table_;
  std::string partial_;      // the current line so far, at most kMaxRatingsLineBytes
  bool overlong_ = false;    // the current line has passed the limit: skip to its newline
  int64_t line_number_ = 0;  // 1-based number of the line being parsed
  struct Index;              // id → dense index maps and seen pairs
  std::shared_ptr<Index> index_;
};

// Reads a ratings CSV file. NotFound / InvalidArgument name the file and the fix.
absl::StatusOr<RatingsTable> ReadRatingsCsv(const std::string& path);

// Per user, by (timestamp, item): the latest `test_fraction` of a user's ratings (at least one,
// when the user has two or more) are test; the rest train. Users with one rating are all train.
// The same table gives the same split everywhere. `ranking_target` is each user's latest rating:
// the item the ranking metrics hide among negatives.
struct RatingsSplit {
  std::vector<Rating> train, test;
  std::vector<Rating> ranking_target;  // at most one per user, sorted by user
};
RatingsSplit SplitByTime(const RatingsTable& table, double test_fraction);

// Up to `count` distinct items that `user` never rated (in train or test), drawn uniformly with a
// seed that depends only on (seed, user): every rank and every run draws the same ones.
// `rated_sorted` is the user's rated items, sorted.
std::vector<int32_t> SampleUnratedItems(int32_t user, const std::vector<int32_t>& rated_sorted, int32_t num_items,
                                        int count, uint64_t seed);

// Every user's rated items, sorted (index: dense user).
std::vector<std::vector<int32_t>> RatedItemsByUser(const RatingsTable& table);

}  // namespace dtrun::data
