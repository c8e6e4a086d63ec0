#include "tests/support/metrics_schema.h"

#include <fstream>
#include <set>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"

namespace dtrun::testing {

void ExpectMetricsFollowSchema(const std::string& metrics_jsonl) {
  std::ifstream schema_file(SourceDir() + "/worker/metrics_schema.json");
  const nlohmann::json schema = nlohmann::json::parse(schema_file, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(schema.is_object()) << "worker/metrics_schema.json does not parse";
  std::ifstream in(metrics_jsonl);
  ASSERT_TRUE(in.good()) << metrics_jsonl;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(record.is_object()) << metrics_jsonl << ":" << n << ": " << line;
    const std::string kind = record.value("kind", "");
    ASSERT_TRUE(schema.contains(kind) && schema[kind].is_array()) << metrics_jsonl << ":" << n << ": kind " << kind;
    const auto names = schema[kind].get<std::set<std::string>>();
    EXPECT_TRUE(record.contains("time")) << metrics_jsonl << ":" << n;
    for (const auto& [name, value] : record.items()) {
      if (name == "kind" || name == "time") continue;
      EXPECT_TRUE(names.count(name)) << metrics_jsonl << ":" << n << ": " << kind << " record has '" << name
                                     << "', which worker/metrics_schema.json does not list";
    }
  }
  EXPECT_GT(n, 0) << metrics_jsonl << " is empty";
}

}  // namespace dtrun::testing
