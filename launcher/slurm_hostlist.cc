#include "launcher/slurm_hostlist.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace dtrun {
namespace {

absl::Status Bad(absl::string_view list, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("hostlist \"", list.substr(0, 200), "\": ", why));
}

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// "01-04,07" → {"01","02","03","04","07"}.
absl::StatusOr<std::vector<std::string>> ExpandRanges(absl::string_view list, absl::string_view ranges, size_t max) {
  std::vector<std::string> out;
  for (absl::string_view range : absl::StrSplit(ranges, ',')) {
    std::pair<absl::string_view, absl::string_view> ends = absl::StrSplit(range, absl::MaxSplits('-', 1));
    absl::string_view lo = ends.first, hi = range.find('-') == absl::string_view::npos ? ends.first : ends.second;
    uint64_t a = 0, b = 0;
    if (!AllDigits(lo) || !AllDigits(hi) || lo.size() > 18 || hi.size() > 18 || !absl::SimpleAtoi(lo, &a) ||
        !absl::SimpleAtoi(hi, &b)) {
      return Bad(list, absl::StrCat("\"", range, "\" is not a number or a range N-M"));
    }
    if (b < a) return Bad(list, absl::StrCat("range \"", range, "\" runs backwards"));
    if (b - a >= max || out.size() + (b - a + 1) > max) return Bad(list, absl::StrCat("more than ", max, " hosts"));
    const size_t width = lo.size();  // "08" pads to 2 digits; "8" does not pad
    for (uint64_t n = a; n <= b; ++n) {
      std::string digits = absl::StrCat(n);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out.push_back(std::move(digits));
    }
  }
  return out;
}

// One host expression (no top-level comma): the product of its literal parts and bracket groups.
absl::Status ExpandOne(absl::string_view list, absl::string_view expr, size_t max, std::vector<std::string>& out) {
  std::vector<std::string> names = {""};
  size_t at = 0;
  while (at < expr.size()) {
    const size_t open = expr.find('[', at);
    const absl::string_view literal = expr.substr(at, open == absl::string_view::npos ? absl::string_view::npos : open - at);
    if (literal.find(']') != absl::string_view::npos) return Bad(list, "a ']' without its '['");
    for (std::string& n : names) absl::StrAppend(&n, literal);
    if (open == absl::string_view::npos) break;
    const size_t close = expr.find(']', open);
    if (close == absl::string_view::npos) return Bad(list, "a '[' without its ']'");
    DT_ASSIGN_OR_RETURN(std::vector<std::string> values,
                        ExpandRanges(list, expr.substr(open + 1, close - open - 1), max));
    if (names.size() * values.size() > max) return Bad(list, absl::StrCat("more than ", max, " hosts"));
    std::vector<std::string> product;
    product.reserve(names.size() * values.size());
    for (const std::string& n : names) {
      for (const std::string& v : values) product.push_back(absl::StrCat(n, v));
    }
    names.swap(product);
    at = close + 1;
  }
  if (out.size() + names.size() > max) return Bad(list, absl::StrCat("more than ", max, " hosts"));
  for (std::string& n : names) {
    if (!n.empty()) out.push_back(std::move(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view list, size_t max_hosts) {
  std::vector<std::string> hosts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[' && ++depth > 1) return Bad(list, "nested '['");
    if (c == ']' && --depth < 0) return Bad(list, "a ']' without its '['");
    if (c != ',' || depth != 0) continue;
    absl::string_view expr = absl::StripAsciiWhitespace(list.substr(start, i - start));
    if (!expr.empty()) {
      DT_RETURN_IF_ERROR(ExpandOne(list, expr, max_hosts, hosts));
    }
    start = i + 1;
  }
  if (depth != 0) return Bad(list, "a '[' without its ']'");
  return hosts;
}

}  // namespace dtrun
