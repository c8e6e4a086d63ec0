// libFuzzer: a ratings CSV (a dataset file is untrusted). Any bytes, fed in two chunks split at
// the first byte's value: nothing crashes; every rating read is in range and names a known user
// and item; the malformed-line examples stay bounded.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "worker/data/ratings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t cut = size == 0 ? 0 : data[0] % size;
  dtrun::data::RatingsParser parser;
  parser.Feed(text.substr(0, cut));
  parser.Feed(text.substr(cut));
  absl::StatusOr<dtrun::data::RatingsTable> t = std::move(parser).Finish("fuzz.csv");
  if (!t.ok()) return 0;
  if (t->malformed_examples.size() > dtrun::data::RatingsTable::kMaxExamples) __builtin_trap();
  for (const dtrun::data::Rating& r : t->ratings) {
    if (r.user < 0 || r.user >= t->num_users() || r.item < 0 || r.item >= t->num_items()) __builtin_trap();
    if (!(r.rating >= dtrun::data::kMinRating && r.rating <= dtrun::data::kMaxRating)) __builtin_trap();
  }
  dtrun::data::RatingsSplit split = dtrun::data::SplitByTime(*t, 0.1);
  if (split.train.size() + split.test.size() != t->ratings.size()) __builtin_trap();
  return 0;
}
