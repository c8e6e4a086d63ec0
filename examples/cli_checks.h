// Flag checks shared by the example trainers: whole numbers and finite reals in a range, and words
// that name an enum's values, with a message that names what is allowed (CLI11 prefixes the flag);
// the benchmark flags both take, and the parse with its exit codes.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "worker/error_record.h"

namespace dtrun::examples {

// Whole numbers in [lo, hi]; the message names the flag (CLI11 prefixes it) and the range.
inline CLI::Validator Ints(long long lo, long long hi = std::numeric_limits<int>::max()) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        long long n = 0;
        size_t used = 0;
        try {
          n = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size() || n < lo || n > hi) return "'" + v + "' is not a whole number in " + std::to_string(lo) + ".." + std::to_string(hi);
        return "";
      },
      "INT");
}

// Finite numbers in [lo, hi] (an open end excludes it): nan, inf and 1e300 are refused here, not
// deep inside LibTorch.
inline CLI::Validator Reals(double lo, double hi, bool open_low = false, bool open_high = false) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        double x = 0;
        size_t used = 0;
        try {
          x = std::stod(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        const bool ok = used == v.size() && std::isfinite(x) && (open_low ? x > lo : x >= lo) &&
                        (open_high ? x < hi : x <= hi);
        if (!ok) {
          return "'" + v + "' is not a number in " + (open_low ? "(" : "[") + CLI::detail::to_string(lo) + ", " +
                 CLI::detail::to_string(hi) + (open_high ? ")" : "]");
        }
        return "";
      },
      "NUMBER");
}

// Makes enum option `opt` take one of `words`, read into the value it names; help shows the words
// ("--lr-schedule step|cosine=step"), anything else is refused with them.
template <typename Enum>
CLI::Option* OneOf(CLI::Option* opt, std::vector<std::pair<std::string, Enum>> words) {
  std::string names;
  for (const auto& [word, value] : words) names += (names.empty() ? "" : "|") + word;
  opt->transform(CLI::Validator(
      [words, names](std::string& v) -> std::string {
        for (const auto& [word, value] : words) {
          if (v == word) {
            v = std::to_string(static_cast<int>(value));  // CLI11 reads an enum from its number
            return "";
          }
        }
        return "'" + v + "' is not one of " + names;
      },
      ""));
  return opt->type_name(names);
}

// --warmup-iters (at least `min_warmup`), --timed-iters and --bench-json; `counted` names what the
// timed steps' rate counts ("images").
struct BenchmarkFlags {
  int* warmup_iters;
  int* timed_iters;
  std::string* bench_json;
};
inline void AddBenchmarkFlags(CLI::App& app, const BenchmarkFlags& f, const std::string& counted, int min_warmup) {
  app.add_option("--warmup-iters", *f.warmup_iters, "Benchmark: untimed steps first")
      ->capture_default_str()
      ->check(Ints(min_warmup));
  app.add_option("--timed-iters", *f.timed_iters, "Benchmark: time this many steps, print " + counted + "/s, stop")
      ->check(Ints(0));
  app.add_option("--bench-json", *f.bench_json, "Benchmark: write the result here (rank 0)");
}

// Parses the command line into `app`. nullopt: go on; else the exit code: 0 after --help or
// --version (printed), 2 for a flag refused (said on stderr and in the error file, with the way
// to --help).
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv, const char* program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    worker::ReportFatalError(program, absl::StrCat("error: ", e.what(), "; run ", program, " --help"));
    return 2;
  }
  return std::nullopt;
}

}  // namespace dtrun::examples
