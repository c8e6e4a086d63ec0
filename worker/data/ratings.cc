#include "worker/data/ratings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrun::data {

struct RatingsParser::Index {
  absl::flat_hash_map<int64_t, int32_t> users, items;
  absl::flat_hash_set<uint64_t> pairs;  // (user << 32) | item
};

namespace {

constexpr int64_t kMaxId = (int64_t{1} << 31) - 1;

// A whole field as an integer, or false (empty, signs other than '-', trailing bytes, overflow).
bool ParseInt(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParseFloat(std::string_view s, double& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Up to 5 comma-separated fields; returns how many there were (5 means "more than 4").
int SplitFields(std::string_view line, std::string_view (&fields)[5]) {
  int n = 0;
  size_t start = 0;
  while (n < 5) {
    size_t comma = line.find(',', start);
    fields[n++] = line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (comma == std::string_view::npos) return n;
    start = comma + 1;
  }
  return n;
}

// "userId,movieId,rating,timestamp", perhaps after a UTF-8 byte-order mark.
bool IsHeader(std::string_view line) {
  const unsigned char c = static_cast<unsigned char>(line[0]);
  return std::isalpha(c) || c == 0xEF;
}

int32_t DenseIndex(absl::flat_hash_map<int64_t, int32_t>& map, std::vector<int64_t>& ids, int64_t id) {
  auto [it, inserted] = map.try_emplace(id, static_cast<int32_t>(ids.size()));
  if (inserted) ids.push_back(id);
  return it->second;
}

}  // namespace

std::string RatingsTable::Summary(const std::string& name) const {
  std::string s = absl::StrCat(name, ": ", ratings.size(), " ratings, ", user_ids.size(), " users, ", item_ids.size(),
                               " items");
  if (duplicates > 0) absl::StrAppend(&s, "; ", duplicates, " repeated (user, item) pairs skipped");
  if (malformed > 0) {
    absl::StrAppend(&s, "; ", malformed, " malformed line", malformed == 1 ? "" : "s", " skipped (",
                    absl::StrJoin(malformed_examples, "; "), malformed > static_cast<int64_t>(malformed_examples.size()) ? "; ..." : "",
                    ")");
  }
  return s;
}

void RatingsParser::Malformed(const std::string& why) {
  ++table_.malformed;
  if (table_.malformed_examples.size() < RatingsTable::kMaxExamples) {
    table_.malformed_examples.push_back(absl::StrCat("line ", line_number_, ": ", why));
  }
}

void RatingsParser::Line(std::string_view line) {
  ++line_number_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (overlong_) {
    ++table_.lines;
    Malformed(absl::StrCat("longer than ", kMaxRatingsLineBytes, " bytes"));
    return;
  }
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;  // blank
  if (line_number_ == 1 && IsHeader(line)) return;
  if (!index_) index_ = std::make_shared<Index>();
  ++table_.lines;
  std::string_view f[5];
  const int n = SplitFields(line, f);
  if (n != 4) {
    Malformed(absl::StrCat(n < 4 ? "" : "more than ", std::min(n, 4), " fields, expected userId,movieId,rating,timestamp"));
    return;
  }
  int64_t user = 0, item = 0, timestamp = 0;
  double rating = 0;
  if (!ParseInt(f[0], user) || !ParseInt(f[1], item)) {
    Malformed("userId and movieId must be whole numbers");
    return;
  }
  if (user < 0 || user > kMaxId || item < 0 || item > kMaxId) {
    Malformed(absl::StrCat("id out of range (userId ", user, ", movieId ", item, "; ids are 0..", kMaxId, ")"));
    return;
  }
  if (!ParseFloat(f[2], rating) || !std::isfinite(rating) || rating < kMinRating || rating > kMaxRating) {
    Malformed(absl::StrCat("rating '", std::string(f[2].substr(0, 20)), "' is not a number in ", kMinRating, "..", kMaxRating));
    return;
  }
  if (!ParseInt(f[3], timestamp) || timestamp < 0) {
    Malformed("timestamp must be a whole number of seconds >= 0");
    return;
  }
  Rating r;
  r.user = DenseIndex(index_->users, table_.user_ids, user);
  r.item = DenseIndex(index_->items, table_.item_ids, item);
  r.rating = static_cast<float>(rating);
  r.timestamp = timestamp;
  if (!index_->pairs.insert((static_cast<uint64_t>(r.user) << 32) | static_cast<uint32_t>(r.item)).second) {
    ++table_.duplicates;
    return;
  }
  table_.ratings.push_back(r);
}

void RatingsParser::Feed(std::string_view chunk) {
  while (!chunk.empty()) {
    size_t nl = chunk.find('\n');
    std::string_view piece = chunk.substr(0, nl);
    if (!overlong_) {
      if (partial_.size() + piece.size() > kMaxRatingsLineBytes) {
        overlong_ = true;
        partial_.clear();
      } else {
        partial_.append(piece);
      }
    }
    if (nl == std::string_view::npos) return;
    Line(partial_);
    partial_.clear();
    overlong_ = false;
    chunk.remove_prefix(nl + 1);
  }
}

absl::StatusOr<RatingsTable> RatingsParser::Finish(const std::string& name) && {
  if (!partial_.empty() || overlong_) Line(partial_);  // a last line without a newline
  if (table_.ratings.empty()) {
    std::string why = table_.lines == 0 ? "it holds no ratings (empty, or only a header)"
                                        : absl::StrCat("none of its ", table_.lines, " lines is a valid rating (",
                                                       absl::StrJoin(table_.malformed_examples, "; "), ")");
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", why, "; give a CSV with lines userId,movieId,rating,timestamp (MovieLens "
                                      "ratings.csv), or make one with `dtdata make-ratings`"));
  }
  return std::move(table_);
}

absl::StatusOr<RatingsTable> ReadRatingsCsv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open the ratings file; give the path of a MovieLens-style ratings.csv"));
  }
  RatingsParser parser;
  std::string buf(1 << 20, '\0');
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    parser.Feed(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error; check the file and the disk"));
  return std::move(parser).Finish(path);
}

RatingsSplit SplitByTime(const RatingsTable& table, double test_fraction) {
  std::vector<std::vector<Rating>> by_user(table.user_ids.size());
  for (const Rating& r : table.ratings) by_user[r.user].push_back(r);
  RatingsSplit split;
  for (std::vector<Rating>& rs : by_user) {
    std::sort(rs.begin(), rs.end(), [](const Rating& a, const Rating& b) {
      return a.timestamp != b.timestamp ? a.timestamp < b.timestamp : a.item < b.item;
    });
    size_t test = 0;
    if (rs.size() >= 2) {
      test = std::clamp<size_t>(static_cast<size_t>(std::lround(test_fraction * static_cast<double>(rs.size()))), 1,
                                rs.size() - 1);
    }
    const size_t cut = rs.size() - test;
    split.train.insert(split.train.end(), rs.begin(), rs.begin() + static_cast<std::ptrdiff_t>(cut));
    split.test.insert(split.test.end(), rs.begin() + static_cast<std::ptrdiff_t>(cut), rs.end());
    if (test > 0) split.ranking_target.push_back(rs.back());
  }
  return split;
}

std::vector<std::vector<int32_t>> RatedItemsByUser(const RatingsTable& table) {
  std::vector<std::vector<int32_t>> rated(table.user_ids.size());
  for (const Rating& r : table.ratings) rated[r.user].push_back(r.item);
  for (auto& items : rated) std::sort(items.begin(), items.end());
  return rated;
}

std::vector<int32_t> SampleUnratedItems(int32_t user, const std::vector<int32_t>& rated_sorted, int32_t num_items,
                                        int count, uint64_t seed) {
  std::vector<int32_t> out;
  const int64_t unrated = static_cast<int64_t>(num_items) - static_cast<int64_t>(rated_sorted.size());
  if (unrated <= 0 || count <= 0) return out;
  const int64_t want = std::min<int64_t>(count, unrated);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(user));
  std::uniform_int_distribution<int32_t> pick(0, num_items - 1);
  absl::flat_hash_set<int32_t> chosen;
  // Rejection sampling while unrated items are plentiful; otherwise enumerate them and shuffle.
  if (unrated >= 2 * want) {
    while (static_cast<int64_t>(out.size()) < want) {
      int32_t item = pick(rng);
      if (std::binary_search(rated_sorted.begin(), rated_sorted.end(), item) || !chosen.insert(item).second) continue;
      out.push_back(item);
    }
    return out;
  }
  for (int32_t item = 0; item < num_items; ++item) {
    if (!std::binary_search(rated_sorted.begin(), rated_sorted.end(), item)) out.push_back(item);
  }
  std::shuffle(out.begin(), out.end(), rng);
  out.resize(static_cast<size_t>(want));
  return out;
}

}  // namespace dtrun::data
